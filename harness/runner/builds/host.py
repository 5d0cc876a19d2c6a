"""The host build: the runner for this machine (the simulator, x86_64 devices), against the
runtime under test, cached so the session and every pytest-xdist worker share one binary.

Its key covers the runner's sources, the runtime (version, package path, libraries' content),
the compiler (path, size, mtime: no process started on the cached path) and the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform as _platform
import shutil
import time
from pathlib import Path

from harness.cache import cached_build
from harness.runner.builds import RunnerBuildError
from harness.runner.builds.cmake import (
    RUNNER_NAME,
    cmake_commands,
    missing_output_error,
    run_commands,
)
from harness.runtime import executorch_version
from harness.runner.builds.inputs import (
    default_cache_root,
    executorch_package_dir,
    runner_source_dir,
    runtime_libraries_digest,
    sources_digest,
)
from harness.runner.builds.tools import cmake_ninja_problem, find_cxx, nlohmann_json_problem


def host_build_commands(build_dir: Path, source_dir: Path | None = None) -> list[list[str]]:
    """Configure and build command lines for a host (x86_64 simulator) runner
    against the installed executorch wheel, Release, with Ninja."""
    pkg = executorch_package_dir()
    prefix = str(pkg) if pkg is not None else "<site-packages>/executorch"
    return cmake_commands(build_dir, source_dir, [f"-DCMAKE_PREFIX_PATH={prefix}"])


def host_runner_available() -> tuple[bool, str]:
    """Whether a host build is possible here, and if not, why (and what to
    install)."""
    pkg = executorch_package_dir()
    if pkg is None:
        return False, (
            "the executorch wheel is not installed (or ships no CMake package): "
            "pip install executorch"
        )
    if not any((pkg / "lib").glob("libexecutorch.so*")) and not any(
            (pkg / "lib").glob("libexecutorch.a")):
        return False, (
            f"the executorch package at {pkg} ships no libexecutorch.so, so a C++ "
            "runner has nothing to link (install the Linux executorch wheel, or pass an "
            "--executorch-prefix with the C++ libraries: executorch 1.4.x wheels ship only "
            "the Python pybindings)"
        )
    from harness.runtime import current, host_machine

    machine = current().machine
    if machine not in (None, host_machine()):
        return False, (f"the runtime at {pkg} is built for {machine}, not this host "
                       f"({host_machine()}); a device of that kind runs it")
    problem = cmake_ninja_problem()
    if problem:
        return False, problem
    if find_cxx() is None:
        return False, (
            "no C++ compiler found: install g++ or clang (e.g. apt-get install g++) "
            "or set CXX"
        )
    problem = nlohmann_json_problem()
    return (False, problem) if problem else (True, "")


def host_build_key(src: Path) -> str:
    """Hash of the runner sources, the executorch version and package path,
    the compiler (path, size, mtime: no subprocess on the fast path) and the
    machine."""
    h = hashlib.sha256(sources_digest(src).encode())
    pkg = executorch_package_dir()
    h.update(f"executorch={executorch_version()}@{pkg}".encode())
    if pkg is not None:
        h.update(f"libs={runtime_libraries_digest(pkg / 'lib')}".encode())
    cxx = find_cxx()
    if cxx is not None:
        real = cxx.resolve()
        with contextlib.suppress(OSError):
            st = real.stat()
            h.update(f"cxx={real}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(f"cxxenv={os.environ.get('CXX', '')}:{os.environ.get('CXXFLAGS', '')}".encode())
    h.update(f"machine={_platform.machine()}".encode())
    return h.hexdigest()[:16]


def host_build_dir(cache_dir: Path | None = None) -> Path:
    """Where :func:`build_host_runner` puts (or finds) the build of the current sources."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    return root / host_build_key(runner_source_dir()) / "build"


def build_host_runner(cache_dir: Path | None = None, force: bool = False) -> Path:
    """Builds the host runner once and returns the binary's path.

    Cached under ``<cache_dir>/<hash>/`` (default :func:`default_cache_root`),
    the hash covering the runner sources, the executorch version and the
    compiler. Safe to call from several processes at once (file lock); a
    cached binary is returned without running any tool. ``force`` rebuilds.
    Raises RunnerBuildError when tools are missing or the build fails.
    """
    src = runner_source_dir()
    root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    key = host_build_key(src)
    entry = root / key
    binary = entry / "build" / RUNNER_NAME

    def preflight() -> None:
        ok, why = host_runner_available()
        if not ok:
            raise RunnerBuildError(f"cannot build the native runner: {why}")

    def build() -> str:
        build_dir = entry / "build"
        binary.unlink(missing_ok=True)  # a damaged one is newer than its inputs: ninja keeps it
        if force and build_dir.exists():
            shutil.rmtree(build_dir)
        log = entry / "build.log"
        started = time.monotonic()
        run_commands(host_build_commands(build_dir, src), log, "native runner host build")
        if not binary.is_file():
            raise missing_output_error("native runner host build", binary, log)
        return (f"executorch={executorch_version()}\n"
                f"seconds={time.monotonic() - started:.1f}\n")

    # Another process may finish (or repair) the build while this one waits for the lock.
    cached_build(entry, [binary], build, "native runner build", force, preflight)
    return binary
