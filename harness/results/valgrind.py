"""valgrind's XML report of a run (--valgrind) as findings: what went wrong, where, and whose.

Read with the standard library's xml.etree: valgrind's XML (protocol 4) is a documented flat
format (docs/internals/xml-output-protocol4.txt in valgrind's source) with one <error> per
finding, so no parser dependency is needed. Each finding keeps its kind, its stack, the
auxiliary stacks (where the block was freed or allocated, where an uninitialised value came
from), the size valgrind states, and the library of its top frame in ExecuTorch or QNN (the
defect's library: frames above it are the allocator's or libc's).
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from typing import Any

# Libraries whose frames say whose code went wrong, by the start of their file name.
OWNERS = (("harness-", "harness"), ("libQnn", "qnn"), ("libexecutorch", "executorch"),
          ("_portable_lib", "executorch"))
INTERPOSER = "harness-interposer"
"""The name a frame of the harness's QNN interposer gets: its file is called libQnnHtp.so too
(it stands in front of the real one), so its frames would pass for QNN's."""
# The runner's own step functions (harness/runner/native/runner.cpp) -> the scenario op.
RUNNER_OPS = {"load_module": "load_module", "load_method": "load_method",
              "execute": "execute", "unload_method": "unload_method",
              "destroy_module": "destroy_module", "set_option": "set_option",
              "get_option": "get_option"}
_SIZE = re.compile(r"of size ([\d,]+)")
_RUNNER_FN = re.compile(r"harness::Runner::(\w+)\(")


@dataclasses.dataclass(frozen=True)
class Frame:
    obj: str  # the object file's name (not its path)
    fn: str = ""
    file: str = ""
    line: int | None = None

    def describe(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file and self.line else ""
        return f"{short_name(self.fn) or '??'} [{self.obj}]{where}"

    def owner(self) -> str:
        return next((who for prefix, who in OWNERS if self.obj.startswith(prefix)), "")


@dataclasses.dataclass(frozen=True)
class Finding:
    kind: str  # valgrind's: InvalidRead, UninitCondition, Leak_DefinitelyLost, Race, ...
    what: str  # valgrind's words
    stack: tuple[Frame, ...]
    aux: tuple[tuple[str, tuple[Frame, ...]], ...] = ()  # (valgrind's words, stack)
    size: int | None = None  # bytes read or written, or leaked
    block: int | None = None  # the size of the block an invalid access was in

    @property
    def library(self) -> str:
        """The object file of the top frame in ExecuTorch or QNN (the defect's library)."""
        frame = next((f for f in self.stack if f.owner() in ("qnn", "executorch")), None)
        return frame.obj if frame else ""

    @property
    def where(self) -> str:
        """qnn or executorch (the top frame's owner), "" when neither appears."""
        frame = next((f for f in self.stack if f.owner() in ("qnn", "executorch")), None)
        return frame.owner() if frame else ""

    def runner_op(self, stack: tuple[Frame, ...] | None = None) -> str:
        """The scenario op the runner was running (its innermost `harness::Runner::<op>`
        frame), "" when no such frame is on the stack (exit handlers, a thread of QNN's)."""
        for frame in stack if stack is not None else self.stack:
            found = _RUNNER_FN.search(frame.fn)
            if found and found.group(1) in RUNNER_OPS:
                return RUNNER_OPS[found.group(1)]
        return ""

    def signature(self, frames: int = 12) -> str:
        """One line a known issue's `match` reads: kind, size, library and the frames, each
        auxiliary stack's first frames after its words."""
        size = f" size={self.size}" if self.size is not None else ""
        block = f" block={self.block}" if self.block is not None else ""
        top = " <- ".join(f.describe() for f in _own(self.stack)[:frames])
        aux = "".join(f"; {words}: " + " <- ".join(f.describe() for f in _own(stack)[:4])
                      for words, stack in self.aux)
        return f"valgrind {self.kind}{size}{block} in {self.library or '?'}: {top}{aux}"

    def entry(self) -> dict[str, Any]:
        """For results.json."""
        return {"kind": self.kind, "what": self.what, "size": self.size, "block": self.block,
                "library": self.library, "where": self.where,
                "stack": [dataclasses.asdict(f) for f in self.stack],
                "aux": [{"what": w, "stack": [dataclasses.asdict(f) for f in s]}
                        for w, s in self.aux]}


def short_name(fn: str) -> str:
    """A C++ function's name without template arguments and parameters (`std::_Hashtable<...>::
    _M_erase(...) [clone .isra.0]` -> `std::_Hashtable::_M_erase`): what a signature needs."""
    out, depth = [], 0
    for ch in fn:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).split(" [clone")[0].strip()


def _own(stack: tuple[Frame, ...]) -> list[Frame]:
    """The stack from its first frame in ExecuTorch, QNN or the harness (runner, interposer):
    the allocator's and libc's frames above it say nothing about the defect."""
    for i, frame in enumerate(stack):
        if frame.owner():
            return list(stack[i:])
    return list(stack)


def _stack(element: ET.Element | None) -> tuple[Frame, ...]:
    if element is None:
        return ()
    out = []
    for f in element.findall("frame"):
        line = f.findtext("line")
        path = f.findtext("obj") or ""
        name = INTERPOSER if "/interposer/" in path else path.rsplit("/", 1)[-1]
        out.append(Frame(name, f.findtext("fn") or "",
                         f.findtext("file") or "", int(line) if line and line.isdigit() else None))
    return tuple(out)


def _sizes(kind: str, what: str, error: ET.Element) -> tuple[int | None, int | None]:
    """(the access's or leak's size, the block's size) from valgrind's words."""
    if kind.startswith("Leak_"):
        leaked = error.findtext("xwhat/leakedbytes")
        return (int(leaked) if leaked else None), None
    found = _SIZE.search(what)
    size = int(found.group(1).replace(",", "")) if found else None
    block = None
    for aux in error.findall("auxwhat"):
        m = re.search(r"block of size ([\d,]+)", aux.text or "")
        if m:
            block = int(m.group(1).replace(",", ""))
    return size, block


def parse(text: str) -> list[Finding]:
    """Every <error> of one valgrind XML report, in the order valgrind reported them (errors as
    they happened, leaks at exit). A report cut short (valgrind killed by a timeout) gives the
    errors it holds up to the cut."""
    if not text.strip():
        return []
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return _parse_cut(text)
    return [_finding(e) for e in root.iter("error")]


def _parse_cut(text: str) -> list[Finding]:
    out = []
    for block in re.findall(r"<error>.*?</error>", text, re.DOTALL):
        try:
            out.append(_finding(ET.fromstring(block)))
        except ET.ParseError:
            continue
    return out


def _finding(error: ET.Element) -> Finding:
    kind = error.findtext("kind") or "?"
    what = error.findtext("what") or error.findtext("xwhat/text") or ""
    stacks = error.findall("stack")
    aux: list[tuple[str, tuple[Frame, ...]]] = []
    # An auxwhat (or xauxwhat) names the stack after it: "Address ... is 0 bytes inside a block
    # of size N free'd", then "Block was alloc'd at"; helgrind's other thread's access likewise.
    words = [e.findtext("text") if e.tag == "xauxwhat" else e.text
             for e in error if e.tag in ("auxwhat", "xauxwhat")]
    for i, stack in enumerate(stacks[1:]):
        aux.append(((words[i] if i < len(words) else "") or "", _stack(stack)))
    origin = error.find("origin")
    if origin is not None:
        aux.append((origin.findtext("what") or "origin", _stack(origin.find("stack"))))
    size, block = _sizes(kind, what, error)
    return Finding(kind, what, _stack(stacks[0] if stacks else None), tuple(aux), size, block)
