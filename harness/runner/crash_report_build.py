"""Builds the crash reporter (native/crash_report.cpp) as a library the Python runner preloads.

The native runner links the same source; a Python runner process (the executorch pybindings)
otherwise dies of a signal with no C frames, so its crash could only be matched by the bare
signal. Built on first use with g++, once per source hash, like the QNN interposer.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.cache import cache_root, digest, file_lock

SOURCE = Path(__file__).parent / "native" / "crash_report.cpp"
LIB_NAME = "libharness_crash_report.so"


def build_crash_report() -> Path | None:
    """The preloadable crash reporter, built if needed; None where no C++ compiler is (the
    runner then reports a crash without its site)."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        return None
    key = digest([SOURCE.read_bytes(), compiler])
    out_dir = cache_root() / "crash-report" / key
    output = out_dir / LIB_NAME
    with file_lock(out_dir.parent / f"{key}.lock"):
        if output.is_file():
            return output
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out_dir / (LIB_NAME + ".tmp")
        proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC",
                               "-DHARNESS_CRASH_REPORT_PRELOAD", "-o", str(tmp), str(SOURCE),
                               "-ldl"], capture_output=True, text=True)
        if proc.returncode != 0:
            return None
        tmp.replace(output)
    return output
