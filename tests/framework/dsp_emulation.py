"""Builds `dsp_heap_emulation.c`: the library that answers the QNN C interface as a phone's HTP
does (DSP heap profile events) over the HTP simulator, for the DSP heap tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("dsp_heap_emulation.c")


def build_emulation(out_dir: Path) -> Path:
    """`out_dir/libQnnHtp.so`, named as the real library it stands for."""
    library = out_dir / "libQnnHtp.so"
    built = subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-Wl,-z,nodelete", "-o",
                            str(library), str(SOURCE), "-ldl", "-lpthread"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return library
