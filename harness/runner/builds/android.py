"""The Android build: the runner and the QNN interposer for arm64-v8a Android phones.

The NDK's CMake toolchain file builds the runner against an ExecuTorch install prefix built
for arm64-v8a (ExecuTorch publishes no Android C++ SDK), the NDK's clang compiles the
interposer, and the prefix's shared libraries are copied to ``<build-dir>/lib`` to be pushed
next to the runner (its RUNPATH is ``$ORIGIN``). `build-runner --android` builds into a
directory of one's choice; a session with an Android ``--executorch-prefix`` builds into the
cache (`android_prefix_build`). Each build records the NDK, prefix and platform it was made with
(`ANDROID_BUILD_RECORD`), so `--runtime-variant` builds its backend-registry wrapper the same way
(`build_android_wrapper`: the wrapper's CMake project with the same toolchain file, ABI and
platform level, cached like the interposer) and pushes it with the runner.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as _platform
import shutil
from pathlib import Path

from harness.cache import cache_root, cached_build, digest
from harness.runner.builds import RunnerBuildError
from harness.runner.builds.cmake import (
    DLOPEN_SHIM_NAME,
    INTERPOSER_NAME,
    RUNNER_NAME,
    cmake_commands,
    missing_output_error,
    run_commands,
)
from harness.runner.builds.inputs import (
    default_cache_root,
    runner_source_dir,
    runtime_libraries_digest,
    sources_digest,
)
from harness.runner.builds.tools import find_cmake, find_ninja, nlohmann_json_problem

ANDROID_CACHE_DIR = "android-arm64-v8a"
"""The Android builds' directory under the runner cache root."""

ANDROID_BUILD_RECORD = "harness-android-build.json"
"""Written into an Android build directory: the NDK, ExecuTorch prefix and platform level it was
built with (what the backend-registry wrapper of the same device is built with)."""


ANDROID_ABI = "arm64-v8a"
"""The one ABI the Android builds target (the runner, the interposer, the wrapper)."""

DEFAULT_PLATFORM = 30
"""The Android API level of a build unless told (`build-runner --platform`), and of a recorded
build that names none."""


def ndk_toolchain_file(ndk: Path) -> Path:
    """The NDK's CMake toolchain file, which every Android build is configured with; its absence
    is what tells a path that is not an NDK."""
    return Path(ndk) / "build" / "cmake" / "android.toolchain.cmake"


def prefix_packages(executorch_prefix: Path) -> list[Path]:
    """The ExecuTorch CMake package files of an install prefix (none: not an ExecuTorch
    prefix), which the runner and the wrapper builds find with find_package."""
    prefix = Path(executorch_prefix)
    return (list(prefix.glob("lib/cmake/*/executorch-config.cmake"))
            + list(prefix.glob("lib/cmake/*/ExecuTorchConfig.cmake")))


def android_toolchain_definitions(ndk: Path, executorch_prefix: Path,
                                  platform: int = DEFAULT_PLATFORM) -> list[str]:
    """The CMake definitions of every Android build: the NDK's toolchain file, arm64-v8a, the
    API level, the ExecuTorch prefix (one source for the runner and the wrapper)."""
    return [
        f"-DCMAKE_TOOLCHAIN_FILE={ndk_toolchain_file(ndk)}",
        f"-DANDROID_ABI={ANDROID_ABI}",
        f"-DANDROID_PLATFORM=android-{int(platform)}",
        f"-DCMAKE_PREFIX_PATH={Path(executorch_prefix)}",
        # The NDK toolchain confines package lookup to its sysroot; the
        # ExecuTorch prefix lives outside it.
        "-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH",
    ]


def android_build_commands(
    build_dir: Path,
    ndk: Path,
    executorch_prefix: Path,
    platform: int = DEFAULT_PLATFORM,
    source_dir: Path | None = None,
) -> list[list[str]]:
    """Configure and build command lines for an arm64-v8a Android runner with
    the NDK's toolchain file, against an ExecuTorch install prefix."""
    return cmake_commands(build_dir, source_dir,
                          android_toolchain_definitions(ndk, executorch_prefix, platform))


def android_wrapper_commands(build_dir: Path, ndk: Path, executorch_prefix: Path,
                             platform: int = DEFAULT_PLATFORM) -> list[list[str]]:
    """Configure and build lines of the backend-registry wrapper (`--runtime-variant`) for
    arm64-v8a Android: its CMake project (harness/runtime/wrapper) with the runner's toolchain
    definitions."""
    from harness.runtime.variants import WRAPPER_PROJECT

    return cmake_commands(build_dir, WRAPPER_PROJECT,
                          android_toolchain_definitions(ndk, executorch_prefix, platform))


def _ndk_host_tag() -> str:
    system = _platform.system().lower()
    return f"{'darwin' if system == 'darwin' else 'linux'}-x86_64"


def ndk_clang(ndk: Path, platform: int = DEFAULT_PLATFORM) -> Path:
    """The NDK's clang driver for arm64-v8a at API level `platform`."""
    return (Path(ndk) / "toolchains" / "llvm" / "prebuilt" / _ndk_host_tag() / "bin"
            / f"aarch64-linux-android{int(platform)}-clang")


def android_interposer_command(output: Path, ndk: Path, platform: int = DEFAULT_PLATFORM) -> list[str]:
    """The QNN interposer's compile line with the NDK's clang (no -lpthread on bionic)."""
    from harness.qnn.interposer_build import interposer_command

    return interposer_command(output, str(ndk_clang(ndk, platform)), android=True)


def android_dlopen_shim_command(output: Path, ndk: Path, platform: int = 30) -> list[str]:
    """The dlopen shim's compile line with the NDK's clang (the interposer's source with
    -DHARNESS_DLOPEN_SHIM): a phone's runner preloads it as the simulator's does."""
    from harness.qnn.interposer_build import dlopen_shim_command

    return dlopen_shim_command(output, str(ndk_clang(ndk, platform)), android=True)


def build_android_runner(
    build_dir: Path, ndk: Path, executorch_prefix: Path, platform: int = DEFAULT_PLATFORM
) -> Path:
    """Cross-compiles the runner for arm64-v8a Android into ``build_dir`` and
    returns the binary's path (to push with ``adb push``). Raises
    RunnerBuildError naming what to pass when the NDK or the prefix is wrong."""
    ndk = Path(ndk).expanduser()
    prefix = Path(executorch_prefix).expanduser()
    if not ndk_toolchain_file(ndk).is_file():
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
    if not prefix_packages(prefix):
        raise RunnerBuildError(
            f"{prefix} holds no ExecuTorch CMake package (lib/cmake/ExecuTorch/"
            "executorch-config.cmake): pass --executorch-prefix <the directory ExecuTorch "
            "was installed to with `cmake --install`>"
        )
    if find_cmake() is None:
        raise RunnerBuildError("cmake not found: pip install 'cmake>=3.28'")
    if find_ninja() is None:
        raise RunnerBuildError("ninja not found: pip install ninja")
    problem = nlohmann_json_problem()
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
    interposer, shim = build_dir / INTERPOSER_NAME, build_dir / DLOPEN_SHIM_NAME
    run_commands(
        [*android_build_commands(build_dir, ndk, prefix, platform),
         android_interposer_command(interposer, ndk, platform),
         android_dlopen_shim_command(shim, ndk, platform)],
        log,
        "Android build (runner, QNN interposer and dlopen shim)",
    )
    binary = build_dir / RUNNER_NAME
    for out in (binary, interposer, shim):
        if not out.is_file():
            raise missing_output_error("Android build", out, log)
    (build_dir / ANDROID_BUILD_RECORD).write_text(json.dumps(
        {"ndk": str(ndk.resolve()), "executorch_prefix": str(prefix.resolve()),
         "platform": int(platform)}) + "\n")
    # The runner's RUNPATH is $ORIGIN: shared ExecuTorch libraries (e.g.
    # libqnn_executorch_backend.so) go to the device next to it, from here.
    libs = [p for p in sorted((prefix / "lib").glob("*.so*")) if p.is_file()]
    if libs:
        lib_dir = build_dir / "lib"
        lib_dir.mkdir(exist_ok=True)
        for lib in libs:
            shutil.copy2(lib, lib_dir / lib.name)
    return binary


def default_android_build_dir() -> Path:
    """Where `build-runner --android` builds without --build-dir."""
    return default_cache_root() / ANDROID_CACHE_DIR


def android_prefix_build(prefix: Path, lib_dir: Path, ndk: Path, platform: int = DEFAULT_PLATFORM) -> Path:
    """The Android build against an --executorch-prefix built for Android, cached by the
    runner's sources, the prefix's libraries' content and the NDK; returns its directory."""
    h = hashlib.sha256(sources_digest(runner_source_dir()).encode())
    from harness.qnn.interposer_build import SOURCES as interposer_sources

    for source in interposer_sources:
        h.update(source.read_bytes())
    h.update(f"prefix={prefix}:{runtime_libraries_digest(lib_dir)}:ndk={Path(ndk).resolve()}:"
             f"{platform}".encode())
    entry = default_cache_root() / ANDROID_CACHE_DIR / h.hexdigest()[:16]
    build_dir = entry / "build"
    runner = build_dir / RUNNER_NAME

    def build() -> str:
        runner.unlink(missing_ok=True)
        build_android_runner(build_dir, ndk, prefix, platform)
        return f"prefix={prefix}\n"

    cached_build(entry, [runner], build, "Android runner build")
    return build_dir


def build_android_wrapper(ndk: Path | None, executorch_prefix: Path, platform: int = DEFAULT_PLATFORM,
                          force: bool = False) -> Path:
    """The backend-registry wrapper of `--runtime-variant` for an arm64-v8a Android runner:
    the wrapper's CMake project configured exactly as the runner (`android_toolchain_definitions`)
    and cached by its source, the NDK, the prefix's libraries and the platform level. Raises
    VariantError naming what to set when there is no NDK or no prefix, and the failing line of
    the build log when the build fails."""
    from harness.runtime.variants import LIB_NAME, SOURCE, WRAPPER_PROJECT, VariantError

    what = "the backend-registry wrapper of --runtime-variant for Android"
    if ndk is None:
        raise VariantError(f"{what} is built with the Android NDK, and none is known: set "
                           "ANDROID_NDK to the NDK the runner was built with")
    ndk = Path(ndk).expanduser()
    prefix = Path(executorch_prefix).expanduser()
    if not ndk_toolchain_file(ndk).is_file():
        raise VariantError(f"{what}: {ndk} is not an Android NDK (no build/cmake/"
                           "android.toolchain.cmake): set ANDROID_NDK to the NDK's root, e.g. "
                           "$ANDROID_HOME/ndk/27.2.12479018")
    if not prefix_packages(prefix):
        raise VariantError(f"{what}: {prefix} holds no ExecuTorch CMake package (lib/cmake/"
                           "ExecuTorch/executorch-config.cmake): it needs the arm64-v8a install "
                           "prefix the runner was built against")
    if find_cmake() is None or find_ninja() is None:
        raise VariantError(f"{what} needs cmake and ninja: pip install 'cmake>=3.28' ninja")
    key = digest([SOURCE.read_bytes(), (WRAPPER_PROJECT / "CMakeLists.txt").read_bytes(),
                  str(ndk.resolve()), str(prefix), runtime_libraries_digest(prefix / "lib"),
                  str(int(platform))])
    entry = cache_root() / "registry-wrapper" / f"android-{key}"
    build_dir = entry / "build"
    output = build_dir / LIB_NAME

    def build() -> str:
        output.unlink(missing_ok=True)
        log = entry / "build.log"
        try:
            run_commands(android_wrapper_commands(build_dir, ndk, prefix, platform), log,
                         f"{what} (NDK {ndk}, android-{int(platform)})")
        except RunnerBuildError as exc:
            why = f"{exc.reason}\n" if exc.reason else ""
            raise VariantError(f"building {what} failed: {why}{exc}") from None
        if not output.is_file():
            raise VariantError(str(missing_output_error(f"building {what}", output, log)))
        return ""

    cached_build(entry, [output], build, "Android backend-registry wrapper", force)
    return output


def wrapper_for_android_build(directory: Path) -> Path:
    """The wrapper for the Android build in `directory` (its runner's `ANDROID_BUILD_RECORD`
    names the NDK, prefix and platform; ANDROID_NDK stands in for a recorded NDK that is gone)."""
    from harness.runtime.variants import VariantError

    record = Path(directory) / ANDROID_BUILD_RECORD
    try:
        built = json.loads(record.read_text())
    except (OSError, ValueError):
        raise VariantError(
            f"the Android build in {directory} has no {ANDROID_BUILD_RECORD} (it predates "
            "--runtime-variant on Android, or was not made by the harness): rebuild it with "
            "`python -m harness build-runner --android --ndk <ndk> --executorch-prefix "
            "<prefix>` so the backend-registry wrapper is built with the same NDK and prefix"
        ) from None
    ndk: Path | None = Path(built["ndk"])
    if not ndk_toolchain_file(Path(str(ndk))).parent.is_dir():
        ndk = Path(os.environ["ANDROID_NDK"]) if os.environ.get("ANDROID_NDK") else ndk
    return build_android_wrapper(ndk, Path(built["executorch_prefix"]),
                                 int(built.get("platform", DEFAULT_PLATFORM)))
