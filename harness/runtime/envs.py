"""Released runtimes to test against, fetched from the package registry and cached.

Two kinds, both under the harness cache (`EXECUTORCH_HIL_CACHE`, default ~/.cache/executorch-hil):

- `runtime_venv(executorch, qnn)`: a virtual environment with `executorch==V` (and an
  `onnxruntime-qnn` release for its QAIRT simulator libraries) installed by pip, for
  `python -m harness matrix`. It is made with `--system-site-packages` and torch pinned to the
  global one (`torch==2.13.0`): the venv's own site-packages come first on sys.path, so what pip
  installs there (executorch, onnxruntime-qnn, any dependency whose pin differs) shadows the
  global copy, and what it finds satisfied (torch, numpy, pytest, the harness's dependencies)
  is reused instead of downloading a second torch. A release that needs another torch cannot
  resolve with the pin, and pip's own words say so (the matrix shows them as the reason).
- `unpacked_wheel(executorch)`: the x86_64 wheel of a release, downloaded with `pip download`
  and unpacked, whose `executorch/` is an `--executorch-prefix`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from harness.cache import cache_root, digest, file_lock
from harness.errors import HarnessError

TORCH_PIN = "torch==2.13.0"
"""The global environment's torch; every runtime venv pins it (an unpinned torch is a multi-GB
CUDA build, and a second torch next to the global one is what --system-site-packages avoids)."""

PIP_TIMEOUT_S = 1800

# Run in the new venv: the release's pybindings must import against the global torch from the
# venv's own package (not the global executorch's), and it must ship a QNN runtime library
# (0.4.0 and 0.5.0 ship none). Prints "" or why not.
_PROBE = """
import pathlib, sys
venv = pathlib.Path(sys.prefix).resolve()
try:
    from harness.runner.python_runner import pybindings
    module = pybindings()
except Exception as exc:
    import torch
    print(f"its pybindings do not import with torch {torch.__version__}: "
          f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    sys.exit(0)
import executorch
root = pathlib.Path(list(executorch.__path__)[0]).resolve()
if not pathlib.Path(module.__file__).resolve().is_relative_to(root):
    print(f"its pybindings came from {module.__file__}, outside its package {root}")
    sys.exit(0)
if not (list(root.glob("lib/libexecutorch_backend_qnn.so*")) or
        list(root.glob("backends/qualcomm/**/*qnn_executorch_backend*.so"))):
    print("it ships no QNN runtime library (no libexecutorch_backend_qnn.so or "
          "libqnn_executorch_backend.so)")
"""

ISOLATED = "# Made by the harness: this venv's executorch only (see harness/runtime/envs.py).\n"


def isolate_package(venv: Path) -> bool:
    """Make the venv's own executorch (if pip installed one there) a regular package.

    executorch is a namespace package (no `__init__.py`), and a venv with
    --system-site-packages sees the global executorch too: Python merges both directories into
    one package, so a module the release lacks is imported from the global 1.5.1 (1.4.x has no
    `pybindings/_C`, and a runner asking for it got 1.5.1's). An `__init__.py` in the venv's copy
    makes it a regular package, found first on sys.path, whose `__path__` is its own directory
    alone. Returns whether the venv holds its own executorch."""
    packages = list((venv / "lib").glob("python*/site-packages/executorch"))
    for package in packages:
        init = package / "__init__.py"
        if not init.is_file():
            init.write_text(ISOLATED)
    return bool(packages)


class RuntimeEnvError(HarnessError):
    """A runtime cannot be installed here; the message is pip's own reason."""


@dataclasses.dataclass(frozen=True)
class RuntimeVenv:
    """A cached virtual environment holding one ExecuTorch release (and QNN libraries)."""

    executorch: str  # "1.4.1"
    qnn: str | None  # "onnxruntime-qnn==2.3.0", or None for the global environment's
    path: Path
    seconds: float  # what building it cost (0 when it was cached)
    problem: str = ""  # why it cannot run here although pip installed it ("" when it can)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def label(self) -> str:
        return runtime_label(self.executorch, self.qnn)


def runtime_label(executorch: str, qnn: str | None) -> str:
    """`executorch 1.4.1` or `executorch 1.4.1 + onnxruntime-qnn 2.3.0`."""
    label = f"executorch {executorch}"
    if qnn:
        label += " + " + qnn.replace("==", " ")
    return label


def _pip(args: list[str], python: Path | str, log: Path) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    return proc


def pip_reason(text: str) -> str:
    """pip's own reason in a few words: its first ERROR line(s), else the last line."""
    errors = [line.strip() for line in text.splitlines() if line.startswith("ERROR")]
    if errors:
        return " ".join(errors[:2])[:300]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "pip failed without a message"


def runtime_venv(executorch: str, qnn: str | None = None) -> RuntimeVenv:
    """The cached venv of `executorch==<executorch>` (plus `qnn`, a requirement such as
    `onnxruntime-qnn==2.3.0`), built on first use; RuntimeEnvError with pip's reason when it
    cannot be installed."""
    python_tag = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = digest([f"executorch=={executorch}", qnn or "", TORCH_PIN, python_tag,
                  "system-site-packages", str(Path(sys.executable).resolve())])[:12]
    name = f"executorch-{executorch}" + (f"-{qnn.replace('==', '-')}" if qnn else "")
    path = cache_root() / "runtimes" / f"{name}-{key}"
    marker = path / "harness-runtime.json"
    with file_lock(path.with_name(path.name + ".lock")):
        wrong = venv_identity_problem(path, executorch) if marker.is_file() else ""
        if wrong:  # its marker says done, its runtime says otherwise: made again
            from harness.cache import rebuild_notice

            rebuild_notice(f"the cached runtime venv {path} is damaged: {wrong}; rebuilding it")
            marker.unlink()
        if marker.is_file():
            facts = json.loads(marker.read_text())
            if facts.get("isolated"):
                return RuntimeVenv(executorch, qnn, path, 0.0, facts.get("problem", ""))
            # made before its package was isolated: isolate it and probe it again
            isolate_package(path)
            facts.update(problem=_probe(path), isolated=True)
            marker.write_text(json.dumps(facts) + "\n")
            return RuntimeVenv(executorch, qnn, path, 0.0, facts["problem"])
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        log = path.with_name(path.name + ".log")
        log.write_text("")
        made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(path)],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise RuntimeEnvError(f"python -m venv failed: {made.stderr.strip()[:300]}")
        requirements = [f"executorch=={executorch}", TORCH_PIN] + ([qnn] if qnn else [])
        proc = _pip(["install", "--only-binary=:all:", *requirements], path / "bin" / "python", log)
        if proc.returncode != 0:
            shutil.rmtree(path, ignore_errors=True)
            raise RuntimeEnvError(f"pip install {' '.join(requirements)}: "
                                  f"{pip_reason(proc.stdout + proc.stderr)} (log: {log})")
        isolate_package(path)
        problem = _probe(path)
        seconds = time.monotonic() - started
        marker.write_text(json.dumps({"executorch": executorch, "qnn": qnn, "torch": TORCH_PIN,
                                      "seconds": round(seconds, 1), "problem": problem,
                                      "isolated": True}) + "\n")
        return RuntimeVenv(executorch, qnn, path, seconds, problem)


# The version of the package `import executorch` finds (its version.py), not the metadata's: a
# venv whose package is gone keeps its dist-info while the global package answers the import.
_IDENTITY = ("import importlib.metadata as m, json, executorch as e\n"
             "try:\n    import executorch.version as v; version = v.__version__\n"
             "except ImportError:\n    version = m.version('executorch')\n"
             "print(json.dumps({'version': version, 'path': list(e.__path__)}))")


def venv_identity_problem(venv: Path, executorch: str) -> str:
    """"" when the venv's python imports `executorch` at version `executorch` (from the venv,
    or the global package when that is the release asked for); else what it found instead.
    Asked of the venv (its own interpreter, a plain `import executorch`, which loads nothing
    but the package's `__init__` and version): a venv whose
    site-packages/executorch was gone but whose marker stayed ran the global 1.5.1 under the
    "executorch 1.4.1" column of `harness matrix`."""
    python = venv / "bin" / "python"
    if not python.exists():
        return f"{python} is missing"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "EXECUTORCH_HIL_EXECUTORCH_PREFIX")}
    try:
        asked = subprocess.run([str(python), "-c", _IDENTITY], capture_output=True, text=True,
                               timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"its python does not run ({exc})"
    if asked.returncode != 0:
        return f"its python cannot import executorch ({asked.stderr.strip()[-200:]})"
    try:
        found = json.loads(asked.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"its python answered {asked.stdout.strip()[-200:]!r}"
    if not found["path"]:
        return "its python imports an executorch with no package directory"
    if found["version"].split("+")[0] != executorch:
        outside = [p for p in found["path"]
                   if not Path(p).resolve().is_relative_to(venv.resolve())]
        where = f" (from {', '.join(outside)}, outside the venv)" if outside else ""
        return f"its executorch is {found['version']}, not {executorch}{where}"
    # The global package may serve the venv (--system-site-packages) when it is the release
    # asked for: pip then installs nothing of its own.
    return ""


def _probe(venv: Path) -> str:
    """"" when the venv's release can run here, else why not (the probe's words)."""
    from harness.config.paths import DATA_ROOT

    env = {k: v for k, v in os.environ.items() if k != "EXECUTORCH_HIL_EXECUTORCH_PREFIX"}
    env["PYTHONPATH"] = str(DATA_ROOT)
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", _PROBE], capture_output=True,
                           text=True, timeout=600, env=env)
    lines = probe.stdout.strip().splitlines()
    if probe.returncode:
        return f"probe failed: {probe.stderr.strip()[-300:]}"
    return lines[-1] if lines else ""


def unpacked_wheel(executorch: str) -> Path:
    """The `executorch/` directory of the release's x86_64 wheel for this Python, downloaded
    (`pip download --no-deps --only-binary=:all:`) and unpacked once; an --executorch-prefix."""
    root = cache_root() / "prefixes" / f"executorch-{executorch}"
    package = root / "executorch"
    marker = root / ".harness-unpacked"
    with file_lock(root.with_name(root.name + ".lock")):
        if marker.is_file() and package.is_dir():
            return package
        wheels = cache_root() / "wheels" / "x86_64"
        wheels.mkdir(parents=True, exist_ok=True)
        found = sorted(wheels.glob(f"executorch-{executorch}-*.whl"))
        if not found:
            log = wheels / f"executorch-{executorch}.log"
            log.write_text("")
            proc = _pip(["download", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                         f"executorch=={executorch}"], sys.executable, log)
            if proc.returncode != 0:
                raise RuntimeEnvError(f"pip download executorch=={executorch}: "
                                      f"{pip_reason(proc.stdout + proc.stderr)}")
            found = sorted(wheels.glob(f"executorch-{executorch}-*.whl"))
        if not found:
            raise RuntimeEnvError(f"pip download executorch=={executorch} left no wheel in {wheels}")
        shutil.rmtree(root, ignore_errors=True)
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(found[-1]) as wheel:
            wheel.extractall(tmp)
        tmp.rename(root)
        marker.write_text(f"wheel={found[-1].name}\n")
        return package
