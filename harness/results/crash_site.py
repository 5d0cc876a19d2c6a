"""Where a runner crashed, from the backtrace it wrote before it died (crash_report.h).

A known issue excuses a crash by its site, never by the bare signal: the failure's words start
with one line, `crash site: SIGSEGV at fault address 0x0; frames: #0 ... <- #1 ...`, which an
entry's `match` names (the module of each frame, the exported symbol where one contains the
address, demangled). A crash without a backtrace (a runner that could not write one, the
pybindings' interpreter) has the line `crash site: unknown`, which no exact entry matches.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess

_HEAD = re.compile(r"harness-runner: fatal signal (\d+) \((\w+)\)(?: at fault address (0x[0-9a-f]+)"
                   r"(?: in mapping (.+?))?)?(?: in thread|$)")
_FRAME = re.compile(r"harness-runner:   #(\d+) pc (0x[0-9a-f]+) (.*)$")
_SYMBOL = re.compile(r"harness-runner:   #(\d+)(?: (\S+)\+(0x[0-9a-f]+))?$")
_MODULE = re.compile(r"(\S+)\+(0x[0-9a-f]+)$")


@dataclasses.dataclass(frozen=True)
class Frame:
    index: int
    pc: int
    module: str  # "libQnnHtp.so", or "(not in any mapped file)"
    offset: int | None  # into the module's file
    symbol: str = ""  # the exported symbol containing the pc, demangled, or ""

    def describe(self) -> str:
        where = f"{self.module}+{self.offset:#x}" if self.offset is not None else self.module
        if self.pc == 0:
            where = "0x0 (a call through a null function pointer)"
        return f"#{self.index} {where}" + (f" {self.symbol}" if self.symbol else "")


@dataclasses.dataclass(frozen=True)
class CrashSite:
    signal: str
    fault_address: int | None
    frames: tuple[Frame, ...]
    # what the fault address is: "<file>+0x<offset into it>" of a mapped file,
    # "(anonymous memory)", "(not in any mapped file)"; None from a runner that does not say
    fault_mapping: str | None = None

    def describe(self) -> str:
        at = f" at fault address {self.fault_address:#x}" if self.fault_address is not None else ""
        if self.fault_mapping and self.fault_address and not self.fault_mapping.startswith("("):
            at += f" (inside {self.fault_mapping})"  # a mapped file's page: said as such
        frames = " <- ".join(f.describe() for f in self.frames) or "none"
        return f"crash site: {self.signal}{at}; frames: {frames}"


def parse_crash(text: str) -> CrashSite | None:
    """The first crash report in a runner's stderr, or None when it wrote none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        head = _HEAD.search(line)
        if head is None:
            continue
        frames: dict[int, Frame] = {}
        symbols: dict[int, tuple[str, int]] = {}
        for later in lines[i + 1:]:
            if _HEAD.search(later):
                break
            m = _FRAME.search(later)
            if m:
                module, offset = m.group(3), None
                mm = _MODULE.match(module)
                if mm:
                    module, offset = mm.group(1), int(mm.group(2), 16)
                frames[int(m.group(1))] = Frame(int(m.group(1)), int(m.group(2), 16), module,
                                                offset)
                continue
            s = _SYMBOL.search(later)
            if s and s.group(2):
                symbols[int(s.group(1))] = (s.group(2), int(s.group(3), 16))
        names = _demangle([name for name, _ in symbols.values()])
        out = []
        for index, frame in sorted(frames.items()):
            if index in symbols:
                name, off = symbols[index]
                frame = dataclasses.replace(frame, symbol=f"{names.get(name, name)}+{off:#x}")
            out.append(frame)
        # The backend-registry wrapper of --runtime-variant is the harness's, between the
        # runtime's frames: left out and the rest renumbered, so a crash's frames are the
        # runtime's own with or without it (its known issues' signatures name them).
        from harness.runtime.variants import LIB_NAME

        out = [dataclasses.replace(f, index=i)
               for i, f in enumerate(f for f in out if f.module != LIB_NAME)]
        fault = int(head.group(3), 16) if head.group(3) else None
        return CrashSite(head.group(2), fault, tuple(out), head.group(4))
    return None


def crash_site_line(text: str) -> str:
    """`crash site: ...` for the failure's words; `crash site: unknown` without a report."""
    site = parse_crash(text)
    return site.describe() if site is not None else "crash site: unknown (no backtrace)"


def without_crash_report(text: str) -> str:
    """`text` without the runner's backtrace lines (the crash site line says them once), so a
    log tail keeps the runtime's own last words."""
    lines = text.splitlines()
    if not any(_HEAD.search(line) for line in lines):
        return text
    # The report's lines, and the blank line each starts with (one write per line).
    return "\n".join(line for line in lines if line.strip() and not (
        _HEAD.search(line) or _FRAME.search(line) or _SYMBOL.search(line)
        or "harness-runner: backtrace of the crashing thread:" in line
        or "harness-runner: symbols of the crashing thread:" in line))


def _demangle(names: list[str]) -> dict[str, str]:
    """Demangled C++ names by c++filt (binutils), where it is installed; else as they are."""
    mangled = sorted({n for n in names if n.startswith("_Z")})
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return {}
    try:
        out = subprocess.run([tool], input="\n".join(mangled), capture_output=True, text=True,
                             timeout=10, check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    # Parameter lists make a frame's line long and differ by build: the name alone.
    return {m: _short(d) for m, d in zip(mangled, out)}


def _short(name: str) -> str:
    """A demangled name without its parameter list and template arguments, which differ by
    build and make a frame's line long: `std::_Hashtable<...>::find`."""
    name = re.sub(r"\(.*\)( const)?$", "", name)
    while True:
        shorter = re.sub(r"<[^<>]*>", "\x00", name)
        if shorter == name:
            return name.replace("\x00", "<...>")
        name = shorter
