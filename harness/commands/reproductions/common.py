"""Shared by the reproductions in this folder (copied beside each one): executorch's public
Python API only (the pybindings), numpy, and the standard library.

Each reproduction runs its scenario in a child process (the delegate cache is process-wide, and
a crash must not take the verdict with it), reads the runtime's own words from the child's
stderr, prints expected against actual, and exits 1 while the bug is present, 0 when it is not
(a fixed runtime), 2 when it could not run at all.

Every process it starts runs on the interpreter this one was started with (`sys.executable`,
a venv's own, never the base interpreter behind it) with the QNN libraries found at run time
(`qnn_environment`): `QNN_SDK_ROOT` when set, else the installed `onnxruntime-qnn` wheel.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUG, FIXED, CANNOT_RUN = 1, 0, 2
HOST_LIB = Path("lib") / "x86_64-linux-clang"  # where ExecuTorch looks under QNN_SDK_ROOT
ALIASES = {"libQnnHtpPrepare.so": "libHtpPrepare.so"}  # ExecuTorch's name: the wheel's name
_ENV: dict[str, str] = {}


def qnn_environment() -> dict[str, str]:
    """os.environ with QNN_SDK_ROOT and LD_LIBRARY_PATH naming the QNN libraries (the dynamic
    loader reads LD_LIBRARY_PATH when a process starts, so every QNN process is a child).

    QNN_SDK_ROOT when set (a QAIRT SDK: lib/x86_64-linux-clang); else the installed
    onnxruntime-qnn wheel, whose x86_64 QAIRT libraries (libQnnHtp.so: the HTP simulator) are
    laid out as an SDK in a temporary directory: ExecuTorch looks for libQnnHtpPrepare.so (the
    wheel's libHtpPrepare.so), and the wheel's private libc++ (onnxruntime_qnn.libs/, found
    through $ORIGIN, which a symlinked library does not keep) must sit beside them."""
    if _ENV:
        return dict(_ENV)
    env = os.environ.copy()
    root = env.get("QNN_SDK_ROOT")
    if root:
        lib = Path(root) / HOST_LIB
        if not (lib / "libQnnHtp.so").is_file():
            print(f"cannot run: QNN_SDK_ROOT has no {HOST_LIB / 'libQnnHtp.so'}")
            raise SystemExit(CANNOT_RUN)
    else:
        lib = _wheel_layout()
        env["QNN_SDK_ROOT"] = str(lib.parent.parent)
    inherited = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{lib}:{inherited}" if inherited else str(lib)
    _ENV.update(env)
    return env


def _wheel_layout() -> Path:
    from importlib import metadata

    try:
        dist = metadata.distribution("onnxruntime-qnn")
    except metadata.PackageNotFoundError:
        print("cannot run: no QNN libraries: set QNN_SDK_ROOT to a QAIRT SDK or "
              "`pip install -r requirements.txt` (onnxruntime-qnn)")
        raise SystemExit(CANNOT_RUN) from None
    files = [Path(str(dist.locate_file(f))) for f in dist.files or ()
             if f.parts[0] in ("onnxruntime_qnn", "onnxruntime_qnn.libs") and ".so" in f.name]
    if not any(f.name == "libQnnHtp.so" for f in files):
        print(f"cannot run: onnxruntime-qnn {dist.version} ships no libQnnHtp.so")
        raise SystemExit(CANNOT_RUN)
    root = Path(tempfile.mkdtemp(prefix="qnn-sdk-"))
    atexit.register(shutil.rmtree, root, True)
    lib = root / HOST_LIB
    lib.mkdir(parents=True)
    for f in files:
        if not (lib / f.name).exists():
            (lib / f.name).symlink_to(f)
    for alias, target in ALIASES.items():
        if (lib / target).exists() and not (lib / alias).exists():
            (lib / alias).symlink_to(lib / target)
    return lib


def versions() -> str:
    """What ran, as versions: executorch, torch and the QNN libraries."""
    from importlib import metadata

    found = []
    for name in ("executorch", "torch"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return ", ".join(found + [f"QNN libraries {qnn_libraries()}"])


def qnn_libraries() -> str:
    """Which QNN libraries run, in words (the wheel's release and QAIRT version, or the SDK)."""
    from importlib import metadata

    if os.environ.get("QNN_SDK_ROOT"):
        return "of QNN_SDK_ROOT"
    try:
        dist = metadata.distribution("onnxruntime-qnn")
    except metadata.PackageNotFoundError:
        return "none found"
    info = Path(str(dist.locate_file("onnxruntime_qnn/build_and_package_info.py")))
    qairt = ""
    if info.is_file():
        import re

        found = re.search(r"qnn_version\s*=\s*'([0-9.]+)'", info.read_text())
        qairt = f" (QAIRT {found.group(1)})" if found else ""
    return f"onnxruntime-qnn {dist.version}{qairt}"


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
                          text=True, errors="replace", timeout=timeout, env=qnn_environment())
    return proc.returncode, proc.stdout, proc.stderr


def signal_name(status: int) -> str:
    return signal.Signals(-status).name if status < 0 else f"exit {status}"


def report(bug: bool, expected: str, actual: str, evidence: str = "") -> int:
    """Print the verdict in words and as one JSON line; the exit status."""
    print(f"expected: {expected}")
    print(f"actual:   {actual}")
    if evidence:
        print("the runtime's own words:\n  " + "\n  ".join(evidence.strip().splitlines()[-12:]))
    print(f"versions: {versions()}")
    print("RESULT " + json.dumps({"bug_present": bug}))
    print("BUG PRESENT" if bug else "not reproduced: the behaviour is correct")
    return BUG if bug else FIXED


def lines_with(text: str, *words: str) -> str:
    return "\n".join(l for l in text.splitlines() if any(w in l for w in words))


def cpp_binary() -> Path:
    """cpp/module_repro, built once against the installed executorch's CMake package (CMake >=
    3.28 and ninja, e.g. `pip install 'cmake>=3.28' ninja`); SystemExit(2) when it cannot be."""
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        print("cannot build cpp/module_repro.cpp: no executorch package for this interpreter")
        raise SystemExit(2)
    prefix = next(iter(spec.submodule_search_locations))
    # One build per (this folder, this executorch, the sources): a copied folder or another
    # venv builds afresh instead of reusing a CMake cache made elsewhere.
    key = hashlib.sha256("\0".join([str(HERE), prefix, sys.executable] + [
        (HERE / "cpp" / n).read_text() for n in ("module_repro.cpp", "CMakeLists.txt")])
        .encode()).hexdigest()[:12]
    build = HERE / "cpp" / f"build-{key}"
    binary = build / "module_repro"
    if binary.exists():
        return binary
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


def native(*args: str, timeout: float = 600,
           env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run cpp/module_repro ARGS (with `env` added to its environment): (status, stdout,
    stderr); -SIGNAL when a signal killed it."""
    proc = subprocess.run([str(cpp_binary()), *args], capture_output=True, text=True,
                          errors="replace", timeout=timeout, env={**qnn_environment(), **(env or {})})
    return proc.returncode, proc.stdout, proc.stderr


def input_file(name: str, index: int = 0, variant: int = 0) -> str:
    """The raw bytes of a method input (inputs/<name>_<i>.bin; the program's other input set,
    variant 1: <name>_v1_<i>.bin), for the C++ program."""
    stem = f"{name}_v{variant}" if variant else name
    return str(HERE / "inputs" / f"{stem}_{index}.bin")


def valgrind(tool: str, *args: str, extra: tuple[str, ...] = (),
             timeout: float = 1800) -> tuple[int, str, list[dict]]:
    """Run cpp/module_repro ARGS under `valgrind --tool=TOOL` (valgrind is a system package:
    apt-get install valgrind) and read its XML report with the standard library: (status, the
    program's output, errors). Each error is {"kind", "what", "parts"}: parts are (words,
    frames) in the report's order, the first the error's own stack (words ""), then each
    auxiliary stack after its words ("Address ... free'd", "Block was alloc'd at",
    "Uninitialised value was created by a heap allocation", "This conflicts with a previous
    write ..."); a frame is "function [library]", "??" for a function without a symbol."""
    import xml.etree.ElementTree as ET

    program = shutil.which("valgrind")
    if program is None:
        print("cannot run: no valgrind (a system package: apt-get install valgrind)")
        raise SystemExit(CANNOT_RUN)
    binary = cpp_binary()
    with tempfile.TemporaryDirectory(prefix="valgrind-") as scratch:
        report_file = Path(scratch) / "report.xml"
        cmd = [program, f"--tool={tool}", "--xml=yes", f"--xml-file={report_file}",
               "--num-callers=40", *extra, str(binary), *args]
        shown = [a for a in cmd if not a.startswith("--xml")]
        print("valgrind command (QNN libraries on LD_LIBRARY_PATH): " + " ".join(shown),
              flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env=qnn_environment())
        if not report_file.is_file() or report_file.stat().st_size == 0:
            print(f"cannot run: valgrind wrote no report ({signal_name(proc.returncode)}):\n"
                  f"{proc.stderr[-3000:]}")
            raise SystemExit(CANNOT_RUN)
        root = ET.parse(report_file).getroot()
    errors = []
    for error in root.iter("error"):
        parts: list[tuple[str, list[str]]] = []
        words, what = "", ""
        for item in error:
            if item.tag in ("what", "xwhat", "auxwhat", "xauxwhat"):
                if words and item.tag in ("auxwhat", "xauxwhat"):
                    parts.append((words, []))  # words with no stack of their own
                words = (item.text if item.tag in ("what", "auxwhat") else
                         item.findtext("text")) or ""
                what = what or words
            elif item.tag == "stack":
                frames = [f"{f.findtext('fn') or '??'} [{Path(f.findtext('obj') or '?').name}]"
                          for f in item.findall("frame")]
                parts.append(("" if not parts else words, frames))
                words = ""
        if words:
            parts.append((words, []))
        errors.append({"kind": error.findtext("kind") or "", "what": what, "parts": parts})
    return proc.returncode, proc.stdout + proc.stderr, errors


def describe_error(error: dict, frames: int = 8) -> str:
    """An error of `valgrind` as a few lines: its words, then each stack's first frames."""
    lines = [f"{error['kind']}: {error['what']}"]
    for words, stack in error["parts"]:
        if words and words != error["what"]:
            lines.append(f"  {words}")
        for frame in stack[:frames]:
            lines.append(f"      {frame}")
    return "\n".join(lines)
