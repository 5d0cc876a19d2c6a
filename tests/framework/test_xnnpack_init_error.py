"""Upstream's `XNNPACKBackend::init` (backends/xnnpack/runtime/XNNPACKBackend.cpp, main
cff6f4dd32e6 of 2026-08-22, line 115) ignores the `Error` that
`XNNWeightsCache::initialize_for_runtime` returns. It loses nothing while that function cannot
fail: in upstream's source (main cff6f4dd32e6 and v1.4.1) every return of it is `Error::Ok`, its
failures being logged heap fallbacks. The 1.5.1 wheel's commit is not in the public mirror, so
its compiled function is read instead (binutils objdump): each `ret` traced back to the last
write of `%eax`. If a runtime's initialize_for_runtime can return something else, this fails:
the ignored error then is a defect to file (docs/xnnpack-cache.md).
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.runtime import current

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(\S+)\s*(.*)$")
_KEEPS_EAX = re.compile(r"^(pop|push|add|sub|lea|mov\s+%r[0-9a-z]+,%r(sp|bp|bx|1[2-5])\b|nop)")
_WRITES_EAX = re.compile(r"%(e|r)ax$")


def mangled(library: Path, demangled_part: str) -> str:
    """The one dynamic symbol of `library` whose demangled name contains `demangled_part`."""
    out = subprocess.run(["nm", "-D", "-C", "--defined-only", str(library)], capture_output=True,
                         text=True, check=True).stdout
    raw = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                         text=True, check=True).stdout
    hits = [raw.splitlines()[i].split()[-1] for i, line in enumerate(out.splitlines())
            if demangled_part in line]
    if len(hits) != 1:
        raise AssertionError(f"{library.name}: {len(hits)} symbols named like {demangled_part!r}")
    return hits[0]


def return_values(library: Path, symbol: str) -> list[str]:
    """Per `ret` of the function: the instruction that last set `%eax` before it (e.g. "xor
    %eax,%eax"), or "tail call <target>" for a jump out of the function."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--disassemble={symbol}",
                           str(library)], capture_output=True, text=True, check=True).stdout
    code = [(int(m[1], 16), m[2], m[3].strip()) for m in map(_LINE.match, text.splitlines()) if m]
    if not code:
        raise AssertionError(f"{library.name}: no code for {symbol}")
    start, end = code[0][0], code[-1][0]
    targets = {int(m[1], 16) for _, op, args in code if op.startswith("j")
               and (m := re.match(r"([0-9a-f]+)\s", args + " "))}
    found = []
    for i, (_, op, args) in enumerate(code):
        if op == "jmp" and (target := re.match(r"([0-9a-f]+)\s", args + " ")) and \
                not start <= int(target[1], 16) <= end:
            found.append(f"tail call {args}")
        if op != "ret":
            continue
        j = i - 1
        while j >= 0 and _KEEPS_EAX.match(f"{code[j][1]} {code[j][2]}") and \
                not _WRITES_EAX.search(code[j][2]):
            j -= 1
        if j < 0:
            found.append("nothing")
        elif any(code[j][0] < t <= code[i][0] for t in targets):  # a path joins after the write
            found.append(f"a jump into the return after {code[j][1]} {code[j][2]}")
        else:
            found.append(f"{code[j][1]} {code[j][2]}")
    return found


@pytest.fixture
def xnnpack_library() -> Path:
    runtime = current()
    if shutil.which("objdump") is None or platform.machine() != "x86_64":
        pytest.skip("reads x86-64 code with binutils objdump")
    library = runtime.lib_dir / "libexecutorch_backend_xnnpack.so" if runtime.lib_dir else None
    if library is None or not library.exists():
        pytest.skip(f"{runtime.describe()} has no XNNPACK backend library")
    return library


def test_initialize_for_runtime_returns_ok_on_every_path(xnnpack_library):
    symbol = mangled(xnnpack_library, "XNNWeightsCache::initialize_for_runtime(")
    returns = return_values(xnnpack_library, symbol)
    assert returns and all(r == "xor %eax,%eax" for r in returns), (
        f"{current().describe()}: XNNWeightsCache::initialize_for_runtime can return other than "
        f"Error::Ok ({returns}); XNNPACKBackend::init ignores it: a defect to file")


def test_the_reader_sees_a_function_that_returns_a_variable(xnnpack_library):
    """The control: save_packed_index returns a computed Error, which the reader must see."""
    symbol = mangled(xnnpack_library, "XNNWeightsCache::save_packed_index(")
    returns = return_values(xnnpack_library, symbol)
    assert any(r != "xor %eax,%eax" for r in returns), returns
