"""Build the native lifecycle runner (``harness/runner/native``) and, for the
device targets, the QNN interposer (``harness/qnn/interposer.c``) with it.

Three targets, one CMake command builder (:func:`_cmake_commands`); they
differ only in their extra cmake arguments:

* host: against the installed ``executorch`` wheel (its CMake package, headers
  and shared libraries) with the cmake and ninja from PyPI, cached per (runner
  sources, executorch version, compiler), so the HIL suite and every
  pytest-xdist worker share one binary. The host interposer is built by
  :mod:`harness.qnn.interposer_build` on first use.
* arm64-linux: cross-compiled with Debian's ``aarch64-linux-gnu-g++`` and a
  generated CMake toolchain file against the executorch ``manylinux_2_28_aarch64``
  wheel of the installed version (downloaded with ``pip download`` and unpacked
  under the harness cache). That wheel has no QNN backend, so this runner
  registers XnnpackBackend and OpenvinoBackend, not QnnBackend. Cached like the
  host build; the build directory holds ``harness-runner`` and ``libQnnHtp.so``
  (the interposer, cross-built with ``aarch64-linux-gnu-gcc``). It runs under
  ``qemu-aarch64 -L /usr/aarch64-linux-gnu`` (the loopback device's arm64 mode).
* android: the NDK's toolchain file against an ExecuTorch install prefix built
  for arm64-v8a; the interposer is compiled with the NDK's clang, and the
  prefix's shared libraries are copied to ``<build-dir>/lib``.

Every target also needs nlohmann/json, header-only (Debian package
``nlohmann-json3-dev``): the host's headers, found by
:func:`nlohmann_json_include_dir` and passed as
``-DHARNESS_NLOHMANN_JSON_INCLUDE_DIR``, also serve the cross builds.

CLI (wired as ``python -m harness build-runner``)::

    build-runner --host [--force] [--cache-dir DIR]       prints the binary
    build-runner --arm64-linux [--force] [--cache-dir DIR] prints the build dir
    build-runner --android --ndk <ndk> --executorch-prefix <prefix>
                 [--platform 30] [--build-dir DIR]         prints the build dir
    build-runner (--host | --arm64-linux | --android ...) --print-commands
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
from functools import cache
from pathlib import Path

__all__ = [
    "ARM64_LINUX",
    "COMPONENTS_FILE",
    "INTERPOSER_NAME",
    "RUNNER_NAME",
    "RunnerBuildError",
    "aarch64_executorch_dir",
    "android_build_commands",
    "android_interposer_command",
    "arm64_linux_available",
    "arm64_linux_build_commands",
    "arm64_linux_build_dir",
    "arm64_linux_interposer_command",
    "arm64_linux_toolchain_text",
    "build_android_runner",
    "build_arm64_linux",
    "build_backends",
    "build_components",
    "build_host_runner",
    "default_cache_root",
    "executorch_package_dir",
    "host_build_commands",
    "host_runner_available",
    "main",
    "nlohmann_json_include_dir",
    "runner_source_dir",
]

RUNNER_NAME = "harness-runner"
"""File name of the runner executable inside a build directory."""

INTERPOSER_NAME = "libQnnHtp.so"
"""File name of the QNN interposer inside a device build directory."""

COMPONENTS_FILE = "harness-runner-components.txt"
"""Written by the runner's CMake configure: the ExecuTorch components linked."""

ARM64_LINUX = "arm64-linux"
CROSS_TRIPLE = "aarch64-linux-gnu"
CROSS_SYSROOT = Path("/usr") / CROSS_TRIPLE
"""Debian's cross sysroot (libc6-arm64-cross); qemu-aarch64 -L takes it."""
AARCH64_WHEEL_PLATFORM = "manylinux_2_28_aarch64"
CROSS_PACKAGES = "g++-aarch64-linux-gnu gcc-aarch64-linux-gnu qemu-user"
"""Debian packages for the arm64-linux build (and running it under qemu)."""

NLOHMANN_JSON_PACKAGE = "nlohmann-json3-dev"
"""Debian package of the nlohmann/json headers every runner build includes."""
_NLOHMANN_JSON_DIRS = (Path("/usr/local/include"), Path("/usr/include"))

# The backend each linked component registers (the name `--list-backends` prints).
COMPONENT_BACKENDS = {
    "backend_qnn": "QnnBackend",
    "backend_xnnpack": "XnnpackBackend",
    "backend_openvino": "OpenvinoBackend",
}

# Parts of the aarch64 wheel a C++ build needs: the CMake package, headers, libraries.
_WHEEL_PARTS = ("executorch/lib/", "executorch/include/", "executorch/share/")

MIN_CMAKE = (3, 28)
"""The wheel's imported CMake targets are only defined from CMake 3.28 on."""

_LOG_TAIL_LINES = 40
_SOURCE_SUFFIXES = (".cpp", ".h", ".txt")


class RunnerBuildError(RuntimeError):
    """The native runner cannot be built here; the message says what to do."""


# --------------------------------------------------------------------- paths


def runner_source_dir() -> Path:
    """The runner's CMake source directory (``harness/runner/native``)."""
    return Path(__file__).resolve().parent.parent / "native"


def default_cache_root() -> Path:
    """Where host builds are cached: ``$EXECUTORCH_HIL_CACHE/runner`` or
    ``~/.cache/executorch-hil/runner``."""
    root = os.environ.get("EXECUTORCH_HIL_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "executorch-hil"
    return base / "runner"


def executorch_package_dir() -> Path | None:
    """The CMake package root of the runtime under test (``harness.runtime``): the
    ``--executorch-prefix`` directory, else the installed ``executorch`` package directory
    holding ``share/cmake/executorch-config.cmake``; None when there is none."""
    from harness.runtime import current

    runtime = current()
    if runtime.from_prefix:
        return runtime.cmake_prefix
    spec = importlib.util.find_spec("executorch")
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    for loc in locations:
        if (Path(loc) / "share" / "cmake" / "executorch-config.cmake").is_file():
            return Path(loc)
    return None


def nlohmann_json_include_dir() -> Path | None:
    """The directory holding ``nlohmann/json.hpp`` (/usr/local/include, /usr/include, then
    the Python prefix's include), or None. Header-only, so the host's copy serves the
    cross builds too."""
    for d in (*_NLOHMANN_JSON_DIRS, Path(sys.prefix) / "include"):
        if (d / "nlohmann" / "json.hpp").is_file():
            return d
    return None


def _nlohmann_json_problem() -> str:
    """"" when the nlohmann/json headers are there, else what to install."""
    if nlohmann_json_include_dir() is not None:
        return ""
    return (f"the nlohmann/json headers are not installed (no nlohmann/json.hpp in "
            f"{' or '.join(map(str, _NLOHMANN_JSON_DIRS))}): apt-get install "
            f"{NLOHMANN_JSON_PACKAGE} (scripts/setup.sh does it when run as root or with sudo)")


def _executorch_version() -> str:
    from harness.runtime import current

    return current().version


@cache
def _libraries_digest(lib_dir: Path, stamp: tuple) -> str:
    """sha256 over the names and bytes of a runtime's libraries (`stamp`, their names, sizes
    and mtimes, keys the in-process cache): a rebuilt prefix at the same path and version is
    another runtime, so it gets another runner build."""
    h = hashlib.sha256()
    for name, _size, _mtime in stamp:
        h.update(name.encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(hashlib.sha256((lib_dir / name).read_bytes()).digest())
    return h.hexdigest()


def runtime_libraries_digest(lib_dir: Path | None) -> str:
    """The content digest of the shared and static libraries in `lib_dir` ("" when none)."""
    if lib_dir is None or not lib_dir.is_dir():
        return ""
    stamp = []
    for path in sorted(lib_dir.iterdir()):
        if path.is_file() and (".so" in path.name or path.suffix == ".a"):
            st = path.stat()
            stamp.append((path.name, st.st_size, st.st_mtime_ns))
    return _libraries_digest(lib_dir, tuple(stamp))


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


@cache
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
    tool_dir = _pypi_tool_dir(module, attr)
    if tool_dir is not None:
        cand = tool_dir / name
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


def build_tools() -> tuple[str, str]:
    """(cmake, ninja) as the runner's builds run them: the PyPI tools where found, else the
    bare names."""
    return _tool_or_name(_find_cmake(), "cmake"), _tool_or_name(_find_ninja(), "ninja")


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
    """Configure (Ninja, Release, the nlohmann/json headers, plus `extra` definitions) and
    build lines; one source for every target."""
    src = Path(source_dir) if source_dir is not None else runner_source_dir()
    cmake, ninja = build_tools()
    build = str(Path(build_dir))
    json_dir = nlohmann_json_include_dir() or _NLOHMANN_JSON_DIRS[-1]
    configure = [cmake, "-S", str(src), "-B", build, "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DHARNESS_NLOHMANN_JSON_INCLUDE_DIR={json_dir}", *extra]
    return [configure, [cmake, "--build", build, "--config", "Release"]]


def _cross_tool(name: str) -> Path | None:
    found = shutil.which(f"{CROSS_TRIPLE}-{name}")
    return Path(found) if found else None


def arm64_linux_toolchain_text(
    executorch_prefix: Path, cc: str | None = None, cxx: str | None = None
) -> str:
    """The CMake toolchain file of the arm64-linux build: Debian's aarch64-linux-gnu
    compilers, libraries and headers from the cross sysroot, packages from the sysroot or
    the host (the unpacked aarch64 wheel is a host path)."""
    cc = cc or _tool_or_name(_cross_tool("gcc"), f"{CROSS_TRIPLE}-gcc")
    cxx = cxx or _tool_or_name(_cross_tool("g++"), f"{CROSS_TRIPLE}-g++")
    return "\n".join([
        "# Generated by harness/runner/builds/arm64_linux.py (arm64-linux target).",
        "set(CMAKE_SYSTEM_NAME Linux)",
        "set(CMAKE_SYSTEM_PROCESSOR aarch64)",
        f'set(CMAKE_C_COMPILER "{cc}")',
        f'set(CMAKE_CXX_COMPILER "{cxx}")',
        f'set(CMAKE_FIND_ROOT_PATH "{CROSS_SYSROOT}")',
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)",
        f'set(CMAKE_PREFIX_PATH "{Path(executorch_prefix)}")',
        "",
    ])


def arm64_linux_build_commands(
    build_dir: Path,
    toolchain_file: Path,
    executorch_prefix: Path,
    source_dir: Path | None = None,
) -> list[list[str]]:
    """Configure and build command lines for the arm64-linux runner: the host's, plus the
    generated toolchain file, against the unpacked aarch64 wheel."""
    return _cmake_commands(build_dir, source_dir, [
        f"-DCMAKE_TOOLCHAIN_FILE={Path(toolchain_file)}",
        f"-DCMAKE_PREFIX_PATH={Path(executorch_prefix)}",
    ])


def arm64_linux_interposer_command(output: Path) -> list[str]:
    """The QNN interposer's compile line with the aarch64-linux-gnu gcc."""
    from harness.qnn.interposer_build import interposer_command

    return interposer_command(output, _tool_or_name(_cross_tool("gcc"), f"{CROSS_TRIPLE}-gcc"))


def _ndk_host_tag() -> str:
    system = _platform.system().lower()
    return f"{'darwin' if system == 'darwin' else 'linux'}-x86_64"


def ndk_clang(ndk: Path, platform: int = 30) -> Path:
    """The NDK's clang driver for arm64-v8a at API level `platform`."""
    return (Path(ndk) / "toolchains" / "llvm" / "prebuilt" / _ndk_host_tag() / "bin"
            / f"aarch64-linux-android{int(platform)}-clang")


def android_interposer_command(output: Path, ndk: Path, platform: int = 30) -> list[str]:
    """The QNN interposer's compile line with the NDK's clang (no -lpthread on bionic)."""
    from harness.qnn.interposer_build import interposer_command

    return interposer_command(output, str(ndk_clang(ndk, platform)), android=True)


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
    problem = _cmake_ninja_problem()
    if problem:
        return False, problem
    if _find_cxx() is None:
        return False, (
            "no C++ compiler found: install g++ or clang (e.g. apt-get install g++) "
            "or set CXX"
        )
    problem = _nlohmann_json_problem()
    return (False, problem) if problem else (True, "")


def _cmake_ninja_problem() -> str:
    """"" when a new enough cmake and a ninja are there, else what to install."""
    cmake = _find_cmake()
    if cmake is None:
        return "cmake not found: pip install 'cmake>=3.28'"
    version = _cmake_version(str(cmake))
    if version is None or version < MIN_CMAKE:
        shown = ".".join(map(str, version)) if version else "unknown"
        return (
            f"cmake at {cmake} is version {shown}; the executorch CMake package needs "
            ">= 3.28: pip install 'cmake>=3.28' (into the Python running the harness)"
        )
    if _find_ninja() is None:
        return "ninja not found: pip install ninja"
    return ""


def arm64_linux_available() -> tuple[bool, str]:
    """Whether an arm64-linux build is possible here (cross compilers, cmake, ninja, an
    installed executorch whose version names the aarch64 wheel), and if not, why."""
    from harness.runtime import current

    own = current().from_prefix and current().machine == "aarch64"  # nothing to fetch
    if _executorch_version() == "unknown" and not own:
        return False, (
            "executorch is not installed, so there is no version to fetch the aarch64 wheel "
            "of: pip install executorch"
        )
    missing = [f"{CROSS_TRIPLE}-{t}" for t in ("gcc", "g++") if _cross_tool(t) is None]
    if missing:
        return False, (
            f"the arm64 cross toolchain is not installed ({', '.join(missing)} not found): "
            f"apt-get install {CROSS_PACKAGES} (scripts/setup.sh does it when run as root "
            "or with sudo)"
        )
    problem = _cmake_ninja_problem() or _nlohmann_json_problem()
    return (False, problem) if problem else (True, "")


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
        h.update(f"libs={runtime_libraries_digest(pkg / 'lib')}".encode())
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


# -------------------------------------------------------------- arm64-linux


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def aarch64_wheel_download_command(dest: Path, version: str | None = None) -> list[str]:
    """``pip download`` of the executorch aarch64 wheel of the installed version into `dest`."""
    version = version or _executorch_version()
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--platform", AARCH64_WHEEL_PLATFORM, "--python-version", _python_tag(),
            f"executorch=={version}", "-d", str(dest), "--disable-pip-version-check"]


def _aarch64_paths(version: str) -> tuple[Path, Path]:
    """(download directory, unpack root) of the aarch64 wheel of `version`."""
    from harness.cache import cache_root

    root = cache_root()
    return (root / "wheels" / AARCH64_WHEEL_PLATFORM,
            root / "executorch-aarch64" / f"{version}-cp{_python_tag().replace('.', '')}")


def aarch64_executorch_dir(version: str | None = None, download: bool = True) -> Path:
    """The ``executorch`` directory of the unpacked aarch64 wheel (its CMake package, headers
    and ``lib/``), fetched with pip and unpacked under the harness cache on first use.

    With ``download=False`` only the path is returned (it may not exist yet). Raises
    RunnerBuildError when pip cannot get the wheel."""
    import zipfile

    from harness.cache import file_lock

    from harness.runtime import current

    runtime = current()
    if (version is None and runtime.from_prefix and runtime.machine == "aarch64"
            and runtime.cmake_prefix is not None):
        return runtime.cmake_prefix  # an arm64 Linux build of one's own: built against as is
    version = version or _executorch_version()
    if version == "unknown":
        raise RunnerBuildError("executorch is not installed: pip install executorch")
    wheels, root = _aarch64_paths(version)
    package = root / "executorch"
    marker = root / "unpacked.ok"
    if not download or marker.is_file():
        return package
    with file_lock(root.parent / f"{root.name}.lock"):
        if marker.is_file():
            return package
        pattern = f"executorch-{version}-*-{AARCH64_WHEEL_PLATFORM}.whl"
        found = sorted(wheels.glob(pattern))
        if not found:
            wheels.mkdir(parents=True, exist_ok=True)
            cmd = aarch64_wheel_download_command(wheels, version)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.SubprocessError) as exc:
                raise RunnerBuildError(f"cannot run pip to fetch the aarch64 wheel: {exc}") from exc
            found = sorted(wheels.glob(pattern))
            if proc.returncode != 0 or not found:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise RunnerBuildError(
                    f"fetching the executorch {version} {AARCH64_WHEEL_PLATFORM} wheel failed "
                    f"(exit {proc.returncode}) running: {shlex.join(cmd)}\n{tail}\n"
                    f"(without network access, put the wheel into {wheels} by hand)"
                )
        wheel = found[-1]
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with zipfile.ZipFile(wheel) as archive:
                members = [n for n in archive.namelist() if n.startswith(_WHEEL_PARTS)]
                archive.extractall(tmp, members)
        except (OSError, zipfile.BadZipFile) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RunnerBuildError(
                f"cannot unpack {wheel}: {exc} (delete it to download it again)") from exc
        if not (tmp / "executorch" / "share" / "cmake" / "executorch-config.cmake").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise RunnerBuildError(f"{wheel} ships no CMake package (share/cmake)")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
        marker.write_text(f"wheel={wheel.name}\n")
    return package


def _arm64_build_key(src: Path) -> str:
    """Hash of the runner sources, the interposer source, the executorch version (which names
    the aarch64 wheel), the cross compilers and the toolchain file's shape."""
    from harness.qnn.interposer_build import SOURCE as interposer_source

    h = hashlib.sha256(_sources_digest(src).encode())
    h.update(interposer_source.read_bytes())
    h.update(f"executorch={_executorch_version()}:{AARCH64_WHEEL_PLATFORM}:{_python_tag()}".encode())
    from harness.runtime import current

    runtime = current()
    if runtime.from_prefix and runtime.machine == "aarch64":
        h.update(f"prefix={runtime.cmake_prefix}:{runtime_libraries_digest(runtime.lib_dir)}"
                 .encode())
    for tool in ("gcc", "g++"):
        found = _cross_tool(tool)
        if found is not None:
            real = found.resolve()
            with contextlib.suppress(OSError):
                st = real.stat()
                h.update(f"{tool}={real}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(arm64_linux_toolchain_text(Path("<prefix>"), "<cc>", "<cxx>").encode())
    h.update(f"cxxflags={os.environ.get('CXXFLAGS', '')}".encode())
    return h.hexdigest()[:16]


def arm64_linux_build_dir(cache_dir: Path | None = None) -> Path:
    """Where :func:`build_arm64_linux` puts (or finds) the two binaries."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_root()
    return root / ARM64_LINUX / _arm64_build_key(runner_source_dir()) / "build"


def build_arm64_linux(cache_dir: Path | None = None, force: bool = False) -> Path:
    """Cross-builds the runner and the QNN interposer for arm64 Linux once and returns the
    build directory holding ``harness-runner`` and ``libQnnHtp.so``.

    Cached under ``<cache_dir>/arm64-linux/<hash>/`` (default :func:`default_cache_root`)
    like the host build, and safe from several processes at once. The aarch64 wheel is
    fetched and unpacked on first use (:func:`aarch64_executorch_dir`). Raises
    RunnerBuildError when the cross toolchain is missing or a step fails."""
    src = runner_source_dir()
    build_dir = arm64_linux_build_dir(cache_dir)
    entry = build_dir.parent
    marker = entry / "build.ok"
    binary, interposer = build_dir / RUNNER_NAME, build_dir / INTERPOSER_NAME

    def cached() -> bool:
        return not force and marker.is_file() and binary.is_file() and interposer.is_file()

    if cached():
        return build_dir
    ok, why = arm64_linux_available()
    if not ok:
        raise RunnerBuildError(f"cannot build the arm64-linux runner: {why}")
    with _file_lock(entry.parent / f"{entry.name}.lock"):
        if cached():
            return build_dir
        marker.unlink(missing_ok=True)
        if force and build_dir.exists():
            shutil.rmtree(build_dir)
        started = time.monotonic()
        prefix = aarch64_executorch_dir()
        toolchain = entry / f"{CROSS_TRIPLE}.toolchain.cmake"
        entry.mkdir(parents=True, exist_ok=True)
        toolchain.write_text(arm64_linux_toolchain_text(prefix))
        log = entry / "build.log"
        build_dir.mkdir(parents=True, exist_ok=True)
        _run_commands(
            [*arm64_linux_build_commands(build_dir, toolchain, prefix, src),
             arm64_linux_interposer_command(interposer)],
            log,
            "arm64-linux build (runner and QNN interposer)",
        )
        for out in (binary, interposer):
            if not out.is_file():
                raise RunnerBuildError(
                    f"arm64-linux build finished without producing {out}\n"
                    f"build log: {log}\n--- last lines ---\n{_log_tail(log)}"
                )
        marker.write_text(
            f"executorch={_executorch_version()}\nwheel={prefix}\n"
            f"seconds={time.monotonic() - started:.1f}\n"
        )
    return build_dir


def build_components(build_dir: Path) -> tuple[str, ...]:
    """The ExecuTorch components the runner in `build_dir` links (from its configure)."""
    try:
        text = (Path(build_dir) / COMPONENTS_FILE).read_text()
    except OSError:
        return ()
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def build_backends(build_dir: Path) -> tuple[str, ...]:
    """The backends the runner in `build_dir` registers, from what its configure linked."""
    return tuple(COMPONENT_BACKENDS[c] for c in build_components(build_dir)
                 if c in COMPONENT_BACKENDS)


# ------------------------------------------------------------------ android


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
    problem = _nlohmann_json_problem()
    if problem:
        raise RunnerBuildError(problem)
    clang = ndk_clang(ndk, platform)
    if not clang.is_file():
        raise RunnerBuildError(
            f"the NDK at {ndk} has no {clang.name} (looked for {clang}): pass an NDK (r23 or "
            f"newer) that supports API level {platform} with --ndk, or another --platform"
        )
    build_dir = Path(build_dir)
    log = build_dir / "build.log"
    interposer = build_dir / INTERPOSER_NAME
    _run_commands(
        [*android_build_commands(build_dir, ndk, prefix, platform),
         android_interposer_command(interposer, ndk, platform)],
        log,
        "Android build (runner and QNN interposer)",
    )
    binary = build_dir / RUNNER_NAME
    for out in (binary, interposer):
        if not out.is_file():
            raise RunnerBuildError(
                f"Android build finished without producing {out}\n"
                f"build log: {log}\n--- last lines ---\n{_log_tail(log)}"
            )
    # The runner's RUNPATH is $ORIGIN: shared ExecuTorch libraries (e.g.
    # libqnn_executorch_backend.so) go to the device next to it, from here.
    libs = [p for p in sorted((prefix / "lib").glob("*.so*")) if p.is_file()]
    if libs:
        lib_dir = build_dir / "lib"
        lib_dir.mkdir(exist_ok=True)
        for lib in libs:
            shutil.copy2(lib, lib_dir / lib.name)
    return binary


# ----------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness build-runner",
        description="Build the native lifecycle runner (C++, against ExecuTorch).",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--host", action="store_true", help="build for this machine (default)")
    target.add_argument("--android", action="store_true",
                        help="cross-compile the runner and the QNN interposer for arm64-v8a "
                             "Android (prints the build directory)")
    target.add_argument("--arm64-linux", action="store_true",
                        help="cross-compile the runner and the QNN interposer for arm64 Linux "
                             "against the executorch aarch64 wheel (prints the build directory)")
    p.add_argument("--ndk", type=Path, default=None, help="Android NDK root (default: $ANDROID_NDK)")
    p.add_argument(
        "--executorch-prefix",
        type=Path,
        default=None,
        help="the ExecuTorch build to build against: for --android an install prefix built "
             "for arm64-v8a; for --host and --arm64-linux an unpacked wheel's executorch/ or "
             "a CMake install prefix (default: the installed wheel; for --arm64-linux the "
             "aarch64 wheel of its release)",
    )
    p.add_argument("--platform", type=int, default=30, help="Android API level (default 30)")
    p.add_argument("--build-dir", type=Path, default=None, help="build directory")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="build cache root (host and arm64-linux)")
    p.add_argument("--force", action="store_true",
                   help="rebuild the host or arm64-linux build even if cached")
    p.add_argument(
        "--print-commands",
        action="store_true",
        help="print the configure/build command lines instead of running them",
    )
    return p


def _default_android_build_dir() -> Path:
    return default_cache_root() / "android-arm64-v8a"


def android_prefix_build(prefix: Path, lib_dir: Path, ndk: Path, platform: int = 30) -> Path:
    """The Android build against an --executorch-prefix built for Android, cached by the
    runner's sources, the prefix's libraries' content and the NDK; returns its directory."""
    h = hashlib.sha256(_sources_digest(runner_source_dir()).encode())
    from harness.qnn.interposer_build import SOURCE as interposer_source

    h.update(interposer_source.read_bytes())
    h.update(f"prefix={prefix}:{runtime_libraries_digest(lib_dir)}:ndk={Path(ndk).resolve()}:"
             f"{platform}".encode())
    entry = default_cache_root() / "android-arm64-v8a" / h.hexdigest()[:16]
    build_dir, marker = entry / "build", entry / "build.ok"
    if marker.is_file() and (build_dir / RUNNER_NAME).is_file():
        return build_dir
    with _file_lock(entry.parent / f"{entry.name}.lock"):
        if not (marker.is_file() and (build_dir / RUNNER_NAME).is_file()):
            build_android_runner(build_dir, ndk, prefix, platform)
            marker.write_text(f"prefix={prefix}\n")
    return build_dir


def arm64_linux_script(cache_dir: Path | None = None, build_dir: Path | None = None) -> list[str]:
    """The arm64-linux build as shell lines (what --print-commands shows): fetch and unpack
    the aarch64 wheel, write the toolchain file, configure, build, compile the interposer."""
    version = _executorch_version()
    wheels, _ = _aarch64_paths(version)
    prefix = aarch64_executorch_dir(version, download=False)
    build_dir = Path(build_dir) if build_dir is not None else arm64_linux_build_dir(cache_dir)
    toolchain = build_dir.parent / f"{CROSS_TRIPLE}.toolchain.cmake"
    tag = "cp" + _python_tag().replace(".", "")
    wheel = wheels / f"executorch-{version}-{tag}-{tag}-{AARCH64_WHEEL_PLATFORM}.whl"
    lines = [
        shlex.join(aarch64_wheel_download_command(wheels, version)),
        shlex.join([sys.executable, "-m", "zipfile", "-e", str(wheel), str(prefix.parent)]),
        f"mkdir -p {shlex.quote(str(build_dir))}",
        f"cat > {shlex.quote(str(toolchain))} <<'EOF'\n"
        f"{arm64_linux_toolchain_text(prefix)}EOF",
    ]
    lines += [shlex.join(c) for c in arm64_linux_build_commands(build_dir, toolchain, prefix)]
    lines.append(shlex.join(arm64_linux_interposer_command(build_dir / INTERPOSER_NAME)))
    return lines


def _main_arm64_linux(args: argparse.Namespace) -> int:
    if args.print_commands:
        for line in arm64_linux_script(args.cache_dir, args.build_dir):
            print(line)
        return 0
    if args.build_dir is not None:
        print("build-runner: --arm64-linux builds into the cache (--cache-dir), not --build-dir; "
              "use --print-commands for a build elsewhere", file=sys.stderr)
        return 2
    try:
        build_dir = build_arm64_linux(args.cache_dir, force=args.force)
    except RunnerBuildError as exc:
        print(f"build-runner: {exc}", file=sys.stderr)
        return 1
    print(build_dir)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harness build-runner``: builds (or prints how to build) the
    runner. Returns 0 on success, 1 when the build is impossible or fails,
    2 on bad arguments."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)

    if args.executorch_prefix is not None and not args.android:
        from harness.errors import ConfigError
        from harness.runtime import select

        try:
            select(args.executorch_prefix)
        except ConfigError as exc:
            print(f"build-runner: {exc}", file=sys.stderr)
            return 2
    if args.arm64_linux:
        return _main_arm64_linux(args)
    if args.android:
        ndk = args.ndk or (
            Path(os.environ["ANDROID_NDK"]) if os.environ.get("ANDROID_NDK") else None
        )
        build_dir = args.build_dir or _default_android_build_dir()
        if args.print_commands:
            shown_ndk = ndk if ndk is not None else Path("<ndk>")
            cmds = android_build_commands(
                build_dir,
                shown_ndk,
                args.executorch_prefix or Path("<executorch-prefix>"),
                args.platform,
            )
            cmds.append(android_interposer_command(
                Path(build_dir) / INTERPOSER_NAME, shown_ndk, args.platform))
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
        # The directory: runner, interposer and lib/ (EXECUTORCH_HIL_ANDROID_BUILD takes it).
        print(binary.parent)
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
