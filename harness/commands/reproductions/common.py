"""Shared by the reproductions in this folder (copied beside each one): executorch's public
Python API only (the pybindings), numpy, and the standard library.

Each reproduction runs its scenario in a child process (the delegate cache is process-wide, and
a crash must not take the verdict with it), reads the runtime's own words from the child's
stderr, prints expected against actual, and exits 1 while the bug is present, 0 when it is not
(a fixed runtime), 2 when it could not run at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUG, FIXED, CANNOT_RUN = 1, 0, 2


def pybindings():
    """The executorch pybindings extension (1.5 and later: _C; older: _portable_lib)."""
    import importlib

    try:
        return importlib.import_module("executorch.extension.pybindings._C")
    except ImportError:
        return importlib.import_module("executorch.extension.pybindings._portable_lib")


def inputs(name: str) -> list:
    """The method's inputs shipped beside the reproduction (inputs/<name>_<i>.npy), as tensors."""
    import numpy as np
    import torch

    found = []
    for path in (HERE / "inputs").glob(f"{name}_*.npy"):
        index = path.stem[len(name) + 1:]
        if index.isdigit():  # not another program's inputs whose name extends this one
            found.append((int(index), path))
    return [torch.from_numpy(np.load(path)) for _, path in sorted(found)]


def program(name: str) -> str:
    return str(HERE / "programs" / f"{name}.pte")


def child(mode: str, *args: str, timeout: float = 300) -> tuple[int, str, str]:
    """Run `python <the calling script> --child MODE ARGS` and return (status, stdout, stderr);
    status is -SIGNAL when a signal killed it."""
    script = sys.argv[0]
    proc = subprocess.run([sys.executable, script, "--child", mode, *args], capture_output=True,
                          text=True, errors="replace", timeout=timeout, env=os.environ.copy())
    return proc.returncode, proc.stdout, proc.stderr


def signal_name(status: int) -> str:
    return signal.Signals(-status).name if status < 0 else f"exit {status}"


def report(bug: bool, expected: str, actual: str, evidence: str = "") -> int:
    """Print the verdict in words and as one JSON line; the exit status."""
    print(f"expected: {expected}")
    print(f"actual:   {actual}")
    if evidence:
        print("the runtime's own words:\n  " + "\n  ".join(evidence.strip().splitlines()[-12:]))
    print("RESULT " + json.dumps({"bug_present": bug}))
    print("BUG PRESENT" if bug else "not reproduced: the behaviour is correct")
    return BUG if bug else FIXED


def lines_with(text: str, *words: str) -> str:
    return "\n".join(l for l in text.splitlines() if any(w in l for w in words))


def cpp_binary() -> Path:
    """cpp/module_repro, built once against the installed executorch's CMake package (CMake >=
    3.28 and ninja, e.g. `pip install 'cmake>=3.28' ninja`); SystemExit(2) when it cannot be."""
    import importlib.util
    import shutil

    build = HERE / "cpp" / "build"
    binary = build / "module_repro"
    if binary.exists():
        return binary
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(2)
    prefix = next(iter(spec.submodule_search_locations))
    bindir = Path(sys.executable).parent
    cmake = shutil.which("cmake", path=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    ninja = shutil.which("ninja", path=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    if cmake is None:
        print("cannot build cpp/module_repro.cpp: no cmake (pip install 'cmake>=3.28' ninja)")
        raise SystemExit(2)
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    log = build.with_suffix(".log")
    build.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        for cmd in ([cmake, "-S", str(HERE / "cpp"), "-B", str(build), *generator,
                     "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={prefix}"],
                    [cmake, "--build", str(build)]):
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                print(f"cannot build cpp/module_repro.cpp:\n{log.read_text()[-3000:]}")
                raise SystemExit(2)
    return binary


def native(*args: str, timeout: float = 600) -> tuple[int, str, str]:
    """Run cpp/module_repro ARGS: (status, stdout, stderr); -SIGNAL when a signal killed it."""
    proc = subprocess.run([str(cpp_binary()), *args], capture_output=True, text=True,
                          errors="replace", timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def input_file(name: str, index: int = 0, variant: int = 0) -> str:
    """The raw bytes of a method input (inputs/<name>_<i>.bin; the program's other input set,
    variant 1: <name>_v1_<i>.bin), for the C++ program."""
    stem = f"{name}_v{variant}" if variant else name
    return str(HERE / "inputs" / f"{stem}_{index}.bin")
