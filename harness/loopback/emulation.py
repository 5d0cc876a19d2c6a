"""arm64 mode of the loopback device: pushed aarch64 programs run under qemu-aarch64.

A loopback device started with `ro.product.cpu.abi=arm64-v8a` stands in for an arm64 phone:
an aarch64 ELF pushed to it must run when a shell command starts it, on this x86_64 host.
binfmt_misc (the kernel's way) is often unavailable in containers, so the device does it in
its command rewriting instead:

* `wrap_programs` inserts a launcher before every program a command starts by path (a command
  word containing `/`: `./runner`, `/data/local/tmp/x/runner`, `"$dir"/runner`), wherever
  the shell would start one: at the start of the command, after `&&`, `||`, `;`, `&`, `|`, `(`,
  `$(`, a backquote, `{`, `then`, `do`, ..., after variable assignments (`VAR=x ./runner`) and
  redirections, and after `exec`/`env`/`nohup`/`nice`/`timeout`/`time`.
  So `cd dir && VAR=x ./runner scenario.json` works unchanged.
* the launcher (`<sandbox>/.bin/loopback-exec`, plain sh) looks at the program's ELF header
  when the command runs (so `cd` and variables are already resolved): an executable aarch64
  ELF (EI_CLASS 64-bit, little-endian, e_machine 183) is exec'd as
  `qemu-aarch64 -L /usr/aarch64-linux-gnu <program> <args>`; anything else is exec'd unchanged.
  Both are `exec`s, so the pid a caller sees (`$!`) is the program's (qemu's), and
  `kill <pid>` stops it. The environment, LD_LIBRARY_PATH included, reaches the program as
  is (qemu-user hands its environment to the guest; the guest's loader reads it).

Bare command names (`ls`, `sha256sum`, builtins) are never touched: they are the host's own
programs. Not covered: a program started through a variable alone (`$RUNNER args`) or from
inside a nested `sh -c '...'` string.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

EM_AARCH64 = 183
ARM64_ABI = "arm64-v8a"
LAUNCHER = "loopback-exec"
QEMU_SYSROOT = Path("/usr/aarch64-linux-gnu")
QEMU_NAMES = ("qemu-aarch64", "qemu-aarch64-static")


def elf_machine(path: Path) -> int | None:
    """e_machine of a 64-bit little-endian ELF file, or None if `path` is not one."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return None
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return None
    return int.from_bytes(header[18:20], "little")


def is_arm64_mode(properties: dict[str, str]) -> bool:
    return properties.get("ro.product.cpu.abi") == ARM64_ABI


def arm64_properties(properties: dict[str, str]) -> dict[str, str]:
    """The ABI lists an arm64-only device reports, unless given explicitly."""
    out = dict(properties)
    out.setdefault("ro.product.cpu.abilist", ARM64_ABI)
    out.setdefault("ro.product.cpu.abilist64", ARM64_ABI)
    out.setdefault("ro.product.cpu.abilist32", "")
    return out


def find_qemu() -> str | None:
    for name in QEMU_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


_LAUNCHER_SCRIPT = r"""#!/bin/sh
# loopback-exec: run a program the way an arm64 device would (the loopback device's arm64
# mode). An executable aarch64 ELF (64-bit, little-endian, e_machine 183) runs under
# qemu-aarch64 with the cross sysroot; anything else is exec'd unchanged. exec keeps the pid.
is_aarch64() {
    [ "$1$2$3$4" = "7f454c46" ] && [ "$5$6" = "0201" ] && [ "${19}${20}" = "b700" ]
}
if [ -f "$1" ] && [ -x "$1" ] && is_aarch64 $(od -An -tx1 -v -N20 -- "$1" 2>/dev/null); then
__RUN__
fi
exec "$@"
"""


def launcher_script(qemu: str | None, sysroot: Path = QEMU_SYSROOT) -> str:
    """The launcher's text; without qemu an aarch64 program fails with exit 126 and a message
    saying what to install."""
    if qemu:
        run = f"    exec {shlex.quote(qemu)} -L {shlex.quote(str(sysroot))} \"$@\""
    else:
        run = ("    echo \"loopback: $1 is an aarch64 program and qemu-aarch64 is not installed "
               "(apt-get install qemu-user)\" >&2\n    exit 126")
    return _LAUNCHER_SCRIPT.replace("__RUN__", run)


def install_launcher(sandbox: Path, qemu: str | None = None,
                     sysroot: Path = QEMU_SYSROOT) -> Path:
    """Write `<sandbox>/.bin/loopback-exec` and return its path."""
    path = sandbox / ".bin" / LAUNCHER
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(launcher_script(qemu, sysroot))
    path.chmod(0o755)
    return path


# ------------------------------------------------------------------------- command rewriting

_NAME_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_IO_NUMBER = re.compile(r"^[0-9]+$")
# Reserved words after which the shell expects a command again.
_KEEP_COMMAND = {"if", "then", "else", "elif", "do", "while", "until", "!", "{"}
# Reserved words that start something whose next words are not commands (until a separator).
_NOT_COMMAND = {"for", "case", "in", "fi", "done", "esac", "}"}
# Commands that run the program named later on their command line: name -> options taking a
# value, and how many leading operands precede the program (timeout DURATION).
_PREFIX = {
    "exec": ((), 0), "nohup": ((), 0), "time": ((), 0), "setsid": (("-w", "-f", "-c"), 0),
    "env": (("-u", "-C", "--unset", "--chdir"), 0),
    "nice": (("-n", "--adjustment"), 0),
    "timeout": (("-s", "-k", "--signal", "--kill-after"), 1),
}
_OPERATOR_CHARS = ";&|()<>\n"


class _Scanner:
    """A linear pass over a POSIX sh command line that records where a command word starts
    when that word names a program by path. Quotes, `$(...)`, `${...}`, backquotes, comments
    and here-documents are stepped over so that only real command positions count."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.inserts: list[int] = []

    # --- words ---------------------------------------------------------------------------
    def word(self, i: int) -> tuple[int, str, bool]:
        """Read one word from i: (end, raw text, contains an unquoted-or-quoted `/` outside
        command substitutions). Nested `$(...)` and backquotes are scanned as commands."""
        s, n = self.s, len(self.s)
        start, slash = i, False
        while i < n:
            c = s[i]
            if c in " \t" or c in _OPERATOR_CHARS:
                break
            if c == "\\":
                i += 2
                continue
            if c == "'":
                end = s.find("'", i + 1)
                end = n if end < 0 else end
                slash |= "/" in s[i:end]
                i = end + 1
                continue
            if c == '"':
                i, inner_slash = self._double_quoted(i + 1)
                slash |= inner_slash
                continue
            if c == "`":
                i = self.commands(i + 1, "`")
                continue
            if c == "$" and i + 1 < n and s[i + 1] == "(":
                i = (self._skip_parens(i + 3, 2) if s.startswith("$((", i)
                     else self.commands(i + 2, ")"))
                continue
            if c == "$" and i + 1 < n and s[i + 1] == "{":
                end = s.find("}", i + 2)
                end = n if end < 0 else end
                slash |= "/" in s[i:end]
                i = end + 1
                continue
            slash |= c == "/"
            i += 1
        return min(i, n), s[start:min(i, n)], slash

    def _double_quoted(self, i: int) -> tuple[int, bool]:
        s, n, slash = self.s, len(self.s), False
        while i < n and s[i] != '"':
            if s[i] == "\\":
                i += 2
                continue
            if s[i] == "`":
                i = self.commands(i + 1, "`")
                continue
            if s.startswith("$((", i):
                i = self._skip_parens(i + 3, 2)
                continue
            if s.startswith("$(", i):
                i = self.commands(i + 2, ")")
                continue
            slash |= s[i] == "/"
            i += 1
        return i + 1, slash

    def _skip_parens(self, i: int, depth: int) -> int:
        s, n = self.s, len(self.s)
        while i < n and depth:
            depth += {"(": 1, ")": -1}.get(s[i], 0)
            i += 1
        return i

    # --- commands ------------------------------------------------------------------------
    def commands(self, i: int, stop: str | None = None) -> int:
        """Scan a command list from i up to the closing `stop` (")" or "`"), returning the
        index after it (or the end of the text)."""
        s, n = self.s, len(self.s)
        at_command = True  # the next word is a command word
        prefix: tuple[tuple[str, ...], int] | None = None  # inside `env ... <program>`
        skip_value = False  # the next word is an option's value (prefix commands)
        redirect_target = False  # the next word is a redirection's target
        heredocs: list[str] = []
        depth = 0
        while i < n:
            c = s[i]
            if c in " \t":
                i += 1
                continue
            if stop == "`" and c == "`":
                return i + 1
            if c == "\n":
                i = self._skip_heredocs(i + 1, heredocs)
                heredocs = []
                at_command, prefix = True, None
                continue
            if c == "#" and (i == 0 or s[i - 1] in " \t\n;&|()"):
                end = s.find("\n", i)
                i = n if end < 0 else end
                continue
            if c == ")":
                if depth == 0 and stop == ")":
                    return i + 1
                depth = max(depth - 1, 0)
                at_command, prefix = True, None  # `case` patterns end with `)` too
                i += 1
                continue
            if c == "(":
                depth += 1
                at_command, prefix = True, None
                i += 1
                continue
            if c in "<>":
                op_end = i + 1
                while op_end < n and s[op_end] in "<>&|-":
                    op_end += 1
                op = s[i:op_end]
                i = op_end
                if op.startswith("<<"):
                    while i < n and s[i] in " \t":
                        i += 1
                    end, raw, _ = self.word(i)
                    heredocs.append(raw.replace("'", "").replace('"', "").replace("\\", ""))
                    i = end
                    continue
                if op.endswith("&"):
                    # 2>&1, >&2, <&0: the target is an fd (or -), read as a plain word
                    while i < n and s[i] in " \t":
                        i += 1
                    i = self.word(i)[0]
                    continue
                redirect_target = True
                continue
            if c in ";&|":
                i += 2 if s.startswith(("&&", "||", ";;"), i) else 1
                at_command, prefix = True, None
                continue
            end, raw, slash = self.word(i)
            if redirect_target:
                redirect_target = False
            elif skip_value:
                skip_value = False
            elif at_command:
                if end < n and s[end] in "<>" and _IO_NUMBER.match(raw):
                    pass  # 2>file: an io number, not the command
                elif _NAME_ASSIGN.match(raw):
                    pass  # VAR=value before the command
                elif prefix is not None and raw.startswith("-") and raw != "-":
                    skip_value = raw in prefix[0]
                elif prefix is not None and prefix[1] > 0:
                    prefix = (prefix[0], prefix[1] - 1)  # timeout's DURATION
                elif raw in _KEEP_COMMAND and prefix is None:
                    pass
                elif raw in _NOT_COMMAND and prefix is None:
                    at_command = False
                elif raw in _PREFIX:
                    prefix = _PREFIX[raw]
                else:
                    if slash:
                        self.inserts.append(i)
                    at_command, prefix = False, None
            i = end
        return n

    def _skip_heredocs(self, i: int, delimiters: list[str]) -> int:
        """Step over the bodies of here-documents opened on the line that just ended."""
        s, n = self.s, len(self.s)
        for delimiter in delimiters:
            while i < n:
                end = s.find("\n", i)
                line_end = n if end < 0 else end
                line = s[i:line_end]
                i = line_end + 1
                if line.lstrip("\t") == delimiter:
                    break
        return min(i, n)


def program_positions(command: str) -> list[int]:
    """Offsets in `command` where a command word naming a program by path starts."""
    scanner = _Scanner(command)
    scanner.commands(0)
    return sorted(set(scanner.inserts))


def wrap_programs(command: str, launcher: str) -> str:
    """Put `launcher` (a shell-safe path) before every program `command` starts by path."""
    out, last = [], 0
    for pos in program_positions(command):
        out.append(command[last:pos])
        out.append(f"{launcher} ")
        last = pos
    out.append(command[last:])
    return "".join(out)
