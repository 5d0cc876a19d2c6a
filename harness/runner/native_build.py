"""Build the native lifecycle runner (``harness/runner/native``).

The host build compiles against the installed ``executorch`` wheel (its CMake
package, headers and shared libraries) with the cmake and ninja from PyPI, and
is cached per (runner sources, executorch version, compiler), so the HIL suite
and every pytest-xdist worker share one binary. The Android build
cross-compiles the same sources with the NDK against an ExecuTorch install
prefix built for arm64-v8a.

CLI (wired as ``python -m harness build-runner``)::

    build-runner --host [--force] [--cache-dir DIR]
    build-runner --android --ndk <ndk> --executorch-prefix <prefix>
                 [--platform 30] [--build-dir DIR]
    build-runner (--host | --android ...) --print-commands
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import platform as _platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

__all__ = [
    "RUNNER_NAME",
    "RunnerBuildError",
    "android_build_commands",
    "build_android_runner",
    "build_host_runner",
    "default_cache_root",
    "executorch_package_dir",
    "host_build_commands",
    "host_runner_available",
    "main",
    "runner_source_dir",
]

RUNNER_NAME = "harness-runner"
"""File name of the runner executable inside a build directory."""

MIN_CMAKE = (3, 28)
"""The wheel's imported CMake targets are only defined from CMake 3.28 on."""

_LOG_TAIL_LINES = 40
_SOURCE_SUFFIXES = (".cpp", ".h", ".txt")


class RunnerBuildError(RuntimeError):
    """The native runner cannot be built here; the message says what to do."""


# --------------------------------------------------------------------- paths


def runner_source_dir() -> Path:
    """The runner's CMake source directory (``harness/runner/native``)."""
    return Path(__file__).resolve().parent / "native"


def default_cache_root() -> Path:
    """Where host builds are cached: ``$EXECUTORCH_HIL_CACHE/runner`` or
    ``~/.cache/executorch-hil/runner``."""
    root = os.environ.get("EXECUTORCH_HIL_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "executorch-hil"
    return base / "runner"


def executorch_package_dir() -> Path | None:
    """The installed ``executorch`` package directory holding its CMake
    package (``share/cmake/executorch-config.cmake``), or None."""
    spec = importlib.util.find_spec("executorch")
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    for loc in locations:
        if (Path(loc) / "share" / "cmake" / "executorch-config.cmake").is_file():
            return Path(loc)
    return None


def _executorch_version() -> str:
    try:
        return importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------- tools


def _python_bin_dirs() -> list[Path]:
    dirs = [Path(sys.executable).parent]
    resolved = Path(sys.executable).resolve().parent
    if resolved not in dirs:
        dirs.append(resolved)
    return dirs


def _pypi_tool_dir(module: str, attr: str) -> Path | None:
    """The bin dir a PyPI tool package (cmake, ninja) reports, without
    importing anything when it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = __import__(module)
        value = getattr(mod, attr, None)
    except Exception:  # noqa: BLE001 - a broken tool package is just absent
        return None
    return Path(value) if value else None


def _parse_version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


@lru_cache(maxsize=None)
def _cmake_version(cmake: str) -> tuple[int, ...] | None:
    """Version of the cmake at ``cmake``. For the PyPI cmake (the entry point
    next to sys.executable or the package's own binary) it comes from the
    package metadata, sparing a process start per session."""
    path = Path(cmake)
    pypi_dirs = [*_python_bin_dirs(), _pypi_tool_dir("cmake", "CMAKE_BIN_DIR")]
    if path.parent in pypi_dirs:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = _parse_version(importlib.metadata.version("cmake"))
            if version is not None:
                return version
    try:
        out = subprocess.run(
            [cmake, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\S+)", out)
    return _parse_version(m.group(1)) if m else None


def _find_tool(name: str, module: str, attr: str) -> Path | None:
    """``name`` next to sys.executable (the PyPI package's entry point), then
    the PyPI package's own bin dir, then PATH."""
    for d in _python_bin_dirs():
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    d = _pypi_tool_dir(module, attr)
    if d is not None:
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(name)
    return Path(found) if found else None


def _find_cmake() -> Path | None:
    return _find_tool("cmake", "cmake", "CMAKE_BIN_DIR")


def _find_ninja() -> Path | None:
    return _find_tool("ninja", "ninja", "BIN_DIR")


def _find_cxx() -> Path | None:
    """The C++ compiler CMake will pick for the host: $CXX, else c++/g++/clang++."""
    env = os.environ.get("CXX")
    if env:
        first = shlex.split(env)[0]
        found = shutil.which(first)
        return Path(found) if found else None
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def _tool_or_name(tool: Path | None, name: str) -> str:
    return str(tool) if tool is not None else name


# ------------------------------------------------------------------ commands


def host_build_commands(build_dir: Path, source_dir: Path | None = None) -> list[list[str]]:
    """Configure and build command lines for a host (x86_64 simulator) runner
    against the installed executorch wheel, Release, with Ninja."""
    pkg = executorch_package_dir()
    prefix = str(pkg) if pkg is not None else "<site-packages>/executorch"
    return _cmake_commands(build_dir, source_dir, [f"-DCMAKE_PREFIX_PATH={prefix}"])


def android_build_commands(
    build_dir: Path,
    ndk: Path,
    executorch_prefix: Path,
    platform: int = 30,
    source_dir: Path | None = None,
) -> list[list[str]]:
    """Configure and build command lines for an arm64-v8a Android runner with
    the NDK's toolchain file, against an ExecuTorch install prefix."""
    toolchain = Path(ndk) / "build" / "cmake" / "android.toolchain.cmake"
    return _cmake_commands(build_dir, source_dir, [
        f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
        "-DANDROID_ABI=arm64-v8a",
        f"-DANDROID_PLATFORM=android-{int(platform)}",
        f"-DCMAKE_PREFIX_PATH={Path(executorch_prefix)}",
        # The NDK toolchain confines package lookup to its sysroot; the
        # ExecuTorch prefix lives outside it.
        "-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH",
    ])


def _cmake_commands(build_dir: Path, source_dir: Path | None, extra: list[str]) -> list[list[str]]:
    """Configure (Ninja, Release, plus `extra` definitions) and build lines; one source for
    the host and the Android runner."""
    src = Path(source_dir) if source_dir is not None else runner_source_dir()
    cmake = _tool_or_name(_find_cmake(), "cmake")
    ninja = _tool_or_name(_find_ninja(), "ninja")
    build = str(Path(build_dir))
    configure = [cmake, "-S", str(src), "-B", build, "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release", *extra]
    return [configure, [cmake, "--build", build, "--config", "Release"]]


# -------------------------------------------------------------- availability


def host_runner_available() -> tuple[bool, str]:
    """Whether a host build is possible here, and if not, why (and what to
    install)."""
    pkg = executorch_package_dir()
    if pkg is None:
        return False, (
            "the executorch wheel is not installed (or ships no CMake package): "
            "pip install executorch"
        )
    if not any((pkg / "lib").glob("libexecutorch.so*")):
        return False, (
            f"the executorch package at {pkg} ships no libexecutorch.so, so a C++ "
            "runner has nothing to link (install the Linux executorch wheel)"
        )
    cmake = _find_cmake()
    if cmake is None:
        return False, "cmake not found: pip install 'cmake>=3.28'"
    version = _cmake_version(str(cmake))
    if version is None or version < MIN_CMAKE:
        shown = ".".join(map(str, version)) if version else "unknown"
        return False, (
            f"cmake at {cmake} is version {shown}; the executorch CMake package needs "
            ">= 3.28: pip install 'cmake>=3.28' (into the Python running the harness)"
        )
    if _find_ninja() is None:
        return False, "ninja not found: pip install ninja"
    if _find_cxx() is None:
        return False, (
            "no C++ compiler found: install g++ or clang (e.g. apt-get install g++) "
            "or set CXX"
        )
    return True, ""


# ------------------------------------------------------------------- running


def _log_tail(log: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no build log)"
    return "\n".join(text[-lines:])


def _run_commands(commands: list[list[str]], log: Path, what: str) -> None:
    """Runs the command lines in order, appending their output to ``log``;
    raises RunnerBuildError with the log's tail on the first failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        for cmd in commands:
            out.write("$ " + shlex.join(cmd) + "\n")
            out.flush()
            try:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
            except OSError as exc:
                raise RunnerBuildError(
                    f"{what}: cannot run {cmd[0]}: {exc}. Install cmake and ninja "
                    "(pip install 'cmake>=3.28' ninja)."
                ) from exc
            if proc.returncode != 0:
                out.flush()
                raise RunnerBuildError(
                    f"{what} failed (exit {proc.returncode}) running: {shlex.join(cmd)}\n"
                    f"build log: {log}\n--- last lines ---\n{_log_tail(log)}"
                )


def _sources_digest(src: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in _SOURCE_SUFFIXES):
        h.update(str(path.relative_to(src)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _host_build_key(src: Path) -> str:
    """Hash of the runner sources, the executorch version and package path,
    the compiler (path, size, mtime: no subprocess on the fast path) and the
    machine."""
    h = hashlib.sha256(_sources_digest(src).encode())
    pkg = executorch_package_dir()
    h.update(f"executorch={_executorch_version()}@{pkg}".encode())
    if pkg is not None:
        lib = pkg / "lib" / "libexecutorch.so"
        with contextlib.suppress(OSError):
            st = lib.stat()
            h.update(f"lib={st.st_size}:{st.st_mtime_ns}".encode())
    cxx = _find_cxx()
    if cxx is not None:
        real = cxx.resolve()
        with contextlib.suppress(OSError):
            st = real.stat()
            h.update(f"cxx={real}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(f"cxxenv={os.environ.get('CXX', '')}:{os.environ.get('CXXFLAGS', '')}".encode())
    h.update(f"machine={_platform.machine()}".encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
    key = _host_build_key(src)
    entry = root / key
    binary = entry / "build" / RUNNER_NAME
    marker = entry / "build.ok"
    if not force and marker.is_file() and binary.is_file():
        return binary

    ok, why = host_runner_available()
    if not ok:
        raise RunnerBuildError(f"cannot build the native runner: {why}")

    with _file_lock(root / f"{key}.lock"):
        # Another process may have finished the build while we waited.
        if not force and marker.is_file() and binary.is_file():
            return binary
        marker.unlink(missing_ok=True)
        build_dir = entry / "build"
        if force and build_dir.exists():
            shutil.rmtree(build_dir)
        log = entry / "build.log"
        started = time.monotonic()
        _run_commands(host_build_commands(build_dir, src), log, "native runner host build")
        if not binary.is_file():
            raise RunnerBuildError(
                f"native runner host build finished without producing {binary}\n"
                f"build log: {log}\n--- last lines ---\n{_log_tail(log)}"
            )
        marker.write_text(
            f"executorch={_executorch_version()}\n"
            f"seconds={time.monotonic() - started:.1f}\n"
        )
    return binary


def build_android_runner(
    build_dir: Path, ndk: Path, executorch_prefix: Path, platform: int = 30
) -> Path:
    """Cross-compiles the runner for arm64-v8a Android into ``build_dir`` and
    returns the binary's path (to push with ``adb push``). Raises
    RunnerBuildError naming what to pass when the NDK or the prefix is wrong."""
    ndk = Path(ndk).expanduser()
    prefix = Path(executorch_prefix).expanduser()
    toolchain = ndk / "build" / "cmake" / "android.toolchain.cmake"
    if not toolchain.is_file():
        raise RunnerBuildError(
            f"Android NDK not found at {ndk} (no build/cmake/android.toolchain.cmake): "
            "pass --ndk <path to the NDK, e.g. $ANDROID_HOME/ndk/27.2.12479018> "
            "(or set ANDROID_NDK)"
        )
    if not prefix.is_dir():
        raise RunnerBuildError(
            f"ExecuTorch install prefix not found at {prefix}: pass --executorch-prefix "
            "<the CMAKE_INSTALL_PREFIX of an arm64-v8a ExecuTorch build with "
            "EXECUTORCH_BUILD_EXTENSION_MODULE/TENSOR, XNNPACK and QNN enabled>"
        )
    configs = list(prefix.glob("lib/cmake/*/executorch-config.cmake")) + list(
        prefix.glob("lib/cmake/*/ExecuTorchConfig.cmake")
    )
    if not configs:
        raise RunnerBuildError(
            f"{prefix} holds no ExecuTorch CMake package (lib/cmake/ExecuTorch/"
            "executorch-config.cmake): pass --executorch-prefix <the directory ExecuTorch "
            "was installed to with `cmake --install`>"
        )
    ok_cmake = _find_cmake()
    if ok_cmake is None:
        raise RunnerBuildError("cmake not found: pip install 'cmake>=3.28'")
    if _find_ninja() is None:
        raise RunnerBuildError("ninja not found: pip install ninja")
    build_dir = Path(build_dir)
    log = build_dir / "build.log"
    _run_commands(
        android_build_commands(build_dir, ndk, prefix, platform),
        log,
        "native runner Android build",
    )
    binary = build_dir / RUNNER_NAME
    if not binary.is_file():
        raise RunnerBuildError(
            f"native runner Android build finished without producing {binary}\n"
            f"build log: {log}\n--- last lines ---\n{_log_tail(log)}"
        )
    return binary


# ----------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness build-runner",
        description="Build the native lifecycle runner (C++, against ExecuTorch).",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--host", action="store_true", help="build for this machine (default)")
    target.add_argument("--android", action="store_true", help="cross-compile for arm64-v8a Android")
    p.add_argument("--ndk", type=Path, default=None, help="Android NDK root (default: $ANDROID_NDK)")
    p.add_argument(
        "--executorch-prefix",
        type=Path,
        default=None,
        help="ExecuTorch install prefix built for Android arm64-v8a",
    )
    p.add_argument("--platform", type=int, default=30, help="Android API level (default 30)")
    p.add_argument("--build-dir", type=Path, default=None, help="build directory")
    p.add_argument("--cache-dir", type=Path, default=None, help="host build cache root")
    p.add_argument("--force", action="store_true", help="rebuild the host runner even if cached")
    p.add_argument(
        "--print-commands",
        action="store_true",
        help="print the configure/build command lines instead of running them",
    )
    return p


def _default_android_build_dir() -> Path:
    return default_cache_root() / "android-arm64-v8a"


def main(argv: list[str] | None = None) -> int:
    """``python -m harness build-runner``: builds (or prints how to build) the
    runner. Returns 0 on success, 1 when the build is impossible or fails,
    2 on bad arguments."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)

    if args.android:
        ndk = args.ndk or (
            Path(os.environ["ANDROID_NDK"]) if os.environ.get("ANDROID_NDK") else None
        )
        build_dir = args.build_dir or _default_android_build_dir()
        if args.print_commands:
            cmds = android_build_commands(
                build_dir,
                ndk if ndk is not None else Path("<ndk>"),
                args.executorch_prefix or Path("<executorch-prefix>"),
                args.platform,
            )
            for cmd in cmds:
                print(shlex.join(cmd))
            return 0
        if ndk is None:
            print(
                "build-runner: --android needs --ndk <path to the Android NDK> "
                "(or ANDROID_NDK set)",
                file=sys.stderr,
            )
            return 2
        if args.executorch_prefix is None:
            print(
                "build-runner: --android needs --executorch-prefix <ExecuTorch install "
                "prefix built for arm64-v8a>",
                file=sys.stderr,
            )
            return 2
        try:
            binary = build_android_runner(build_dir, ndk, args.executorch_prefix, args.platform)
        except RunnerBuildError as exc:
            print(f"build-runner: {exc}", file=sys.stderr)
            return 1
        print(binary)
        return 0

    if args.print_commands:
        build_dir = args.build_dir or (
            (args.cache_dir or default_cache_root()) / _host_build_key(runner_source_dir()) / "build"
        )
        for cmd in host_build_commands(build_dir):
            print(shlex.join(cmd))
        return 0
    try:
        if args.build_dir is not None:
            ok, why = host_runner_available()
            if not ok:
                raise RunnerBuildError(f"cannot build the native runner: {why}")
            _run_commands(
                host_build_commands(args.build_dir),
                args.build_dir / "build.log",
                "native runner host build",
            )
            binary = args.build_dir / RUNNER_NAME
        else:
            binary = build_host_runner(args.cache_dir, force=args.force)
    except RunnerBuildError as exc:
        print(f"build-runner: {exc}", file=sys.stderr)
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
