"""The backend-registry wrapper of `--runtime-variant` for Android (harness.runner.builds.android).

No NDK exists on these machines, so (a) the command lines are checked against the runner's own
(toolchain file, ABI, platform level, prefix), (b) the error paths (no NDK, a path that is not
an NDK, a prefix without ExecuTorch, a build that fails, an install with a static core) say
what to do, (c) the wrapper's CMake project really configures and builds through a stand-in
NDK whose toolchain file keeps the host compiler, against the wheel's CMake package seen as an
install prefix, and is cached and pushed like the runner's files, and (d) when clang and a
checkout of bionic's headers are given (HARNESS_BIONIC_LIBC), the source compiles for
aarch64-linux-android and imports only what bionic's libc and libdl export at the API level.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from harness.runner.builds.android import (
    ANDROID_BUILD_RECORD,
    android_build_commands,
    android_wrapper_commands,
    build_android_wrapper,
    wrapper_for_android_build,
)
from harness.runner.builds.cli import main as build_runner
from harness.runner.builds.inputs import executorch_package_dir
from harness.runner.select import DeviceBuild
from harness.runtime.variants import ENV, LIB_NAME, SOURCE, WRAPPER_PROJECT, VariantError, \
    device_preload

REGISTER = "_ZN10executorch7runtime16register_backendERKNS0_7BackendE"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def stand_in_ndk(root: Path, toolchain_text: str = "") -> Path:
    """A directory shaped like an NDK whose toolchain file keeps the host compiler (plus
    `toolchain_text`): the CMake project runs for real, only the compiler is not the NDK's."""
    (root / "build" / "cmake").mkdir(parents=True)
    (root / "build" / "cmake" / "android.toolchain.cmake").write_text(
        "# stand-in for the NDK's toolchain file: the host compiler\n" + toolchain_text)
    return root


def stand_in_prefix(root: Path, config_text: str | None = None) -> Path:
    """An install prefix (lib/cmake/ExecuTorch/executorch-config.cmake) whose package is the
    installed wheel's, or `config_text`."""
    wheel = executorch_package_dir()
    if wheel is None:
        pytest.skip("the executorch wheel's CMake package is not installed")
    config_dir = root / "lib" / "cmake" / "ExecuTorch"
    config_dir.mkdir(parents=True)
    text = config_text if config_text is not None else \
        f'include("{wheel}/share/cmake/executorch-config.cmake")\n'
    (config_dir / "executorch-config.cmake").write_text(text)
    return root


# ------------------------------------------------------------------------- (a)


def test_wrapper_lines_are_the_runners_toolchain_abi_platform_and_prefix(tmp_path):
    ndk, prefix = tmp_path / "ndk", tmp_path / "et-android"
    configure, build = android_wrapper_commands(tmp_path / "w", ndk, prefix, platform=31)
    runner_configure, _ = android_build_commands(tmp_path / "r", ndk, prefix, platform=31)
    assert configure[configure.index("-S") + 1] == str(WRAPPER_PROJECT)
    assert (WRAPPER_PROJECT / "CMakeLists.txt").is_file()
    for definition in (f"-DCMAKE_TOOLCHAIN_FILE={ndk}/build/cmake/android.toolchain.cmake",
                       "-DANDROID_ABI=arm64-v8a", "-DANDROID_PLATFORM=android-31",
                       f"-DCMAKE_PREFIX_PATH={prefix}",
                       "-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH"):
        assert definition in configure and definition in runner_configure
    assert build[1:3] == ["--build", str(tmp_path / "w")]
    # the project compiles the one wrapper source the host and arm64-linux builds compile
    text = (WRAPPER_PROJECT / "CMakeLists.txt").read_text()
    assert f"../{SOURCE.name}" in text and "nodelete" in text


def test_print_commands_show_the_wrapper_build(capsys):
    assert build_runner(["--android", "--print-commands", "--platform", "33"]) == 0
    out = capsys.readouterr().out
    wrapper_lines = [line for line in out.splitlines() if str(WRAPPER_PROJECT) in line]
    assert len(wrapper_lines) == 1, out
    assert "-DANDROID_PLATFORM=android-33" in wrapper_lines[0]
    assert "android.toolchain.cmake" in wrapper_lines[0]


# ------------------------------------------------------------------------- (b)


def test_no_ndk_and_a_path_that_is_not_an_ndk_say_what_to_set(tmp_path, cache):
    prefix = stand_in_prefix(tmp_path / "prefix")
    with pytest.raises(VariantError, match="set ANDROID_NDK"):
        build_android_wrapper(None, prefix)
    (tmp_path / "not-an-ndk").mkdir()
    with pytest.raises(VariantError, match=r"not-an-ndk is not an Android NDK \(no build/cmake/"):
        build_android_wrapper(tmp_path / "not-an-ndk", prefix)
    ndk = stand_in_ndk(tmp_path / "ndk")
    (tmp_path / "empty").mkdir()
    with pytest.raises(VariantError, match="holds no ExecuTorch CMake package"):
        build_android_wrapper(ndk, tmp_path / "empty")


def test_an_android_build_without_its_record_asks_for_a_rebuild(tmp_path, monkeypatch):
    """A build directory from before the record (or made by hand): the variant is one clear
    error naming the command, on the device's payload path (device_preload)."""
    monkeypatch.setenv(ENV, "fix-model")
    build = DeviceBuild("arm64-v8a", tmp_path / "harness-runner", None, (), (), "android")
    cross = build.registry_wrapper()
    assert cross is not None
    with pytest.raises(VariantError, match=f"no {ANDROID_BUILD_RECORD}.*build-runner --android"):
        device_preload(PurePosixPath("/data/local/tmp/ws"), build.kind, "phone 1234", cross)


def test_a_failed_build_surfaces_its_reason(tmp_path, cache):
    """The wrapper's own compile fails (a header it includes refuses it): the error's first
    line is a compiler error line, then the command, the log's path and its tail."""
    shadow = tmp_path / "shadow" / "executorch" / "runtime" / "backend"
    shadow.mkdir(parents=True)
    (shadow / "interface.h").write_text("#error harness stand-in: this interface.h is refused\n")
    ndk = stand_in_ndk(tmp_path / "ndk", f'set(CMAKE_CXX_FLAGS_INIT "-I{tmp_path / "shadow"}")\n')
    prefix = stand_in_prefix(tmp_path / "prefix")
    with pytest.raises(VariantError) as caught:
        build_android_wrapper(ndk, prefix)
    message = str(caught.value)
    first = message.splitlines()[0]
    assert first.startswith("building the backend-registry wrapper of --runtime-variant for "
                            "Android failed: ") and "error:" in first, message
    (log,) = [line.split(": ", 1)[1] for line in message.splitlines()
              if line.startswith("build log: ")]
    assert "this interface.h is refused" in Path(log).read_text()
    assert "android-30" in message


def test_an_install_with_a_static_core_is_refused_with_why(tmp_path, cache):
    """A core linked into the runner statically comes first in symbol lookup: no preloaded
    wrapper could see a registration, so the configure says so instead of building one."""
    ndk = stand_in_ndk(tmp_path / "ndk")
    prefix = stand_in_prefix(tmp_path / "prefix", config_text=(
        "add_library(executorch_core STATIC IMPORTED)\n"
        'set_target_properties(executorch_core PROPERTIES IMPORTED_LOCATION "/nonexistent.a")\n'))
    with pytest.raises(VariantError, match="no shared core library"):
        build_android_wrapper(ndk, prefix)


# ------------------------------------------------------------------------- (c)


def test_the_wrapper_project_builds_caches_and_travels_with_the_runner(tmp_path, cache,
                                                                       monkeypatch):
    ndk = stand_in_ndk(tmp_path / "ndk")
    prefix = stand_in_prefix(tmp_path / "prefix")
    # the record an Android runner build writes next to its runner
    build_dir = tmp_path / "android-build"
    build_dir.mkdir()
    (build_dir / ANDROID_BUILD_RECORD).write_text(json.dumps(
        {"ndk": str(ndk), "executorch_prefix": str(prefix), "platform": 30}))
    wrapper = wrapper_for_android_build(build_dir)
    assert wrapper.name == LIB_NAME and wrapper.is_file()
    assert str(cache) in str(wrapper)
    nm = subprocess.run(["nm", "-D", "--defined-only", str(wrapper)], capture_output=True,
                        text=True, check=True).stdout
    assert REGISTER in nm  # it defines the registry's entry point, to be found first
    dynamic = subprocess.run(["readelf", "-d", str(wrapper)], capture_output=True, text=True,
                             check=True).stdout
    assert "NODELETE" in dynamic and "$ORIGIN" in dynamic  # pinned; finds the pushed libraries
    log = wrapper.parent.parent / "build.log"
    assert "-DANDROID_PLATFORM=android-30" in log.read_text()
    # cached: a second call builds nothing
    stamp = wrapper.stat().st_mtime_ns
    log.write_text("")
    assert build_android_wrapper(ndk, prefix) == wrapper
    assert wrapper.stat().st_mtime_ns == stamp and log.read_text() == ""
    # another platform level is another build
    assert build_android_wrapper(ndk, prefix, platform=33) != wrapper
    # pushed with the runner, preloaded into its runs only (the device run's variables)
    monkeypatch.setenv(ENV, "fix-model-serialized")
    build = DeviceBuild("arm64-v8a", build_dir / "harness-runner", None, (), (), "android")
    files, env = device_preload(PurePosixPath("/data/local/tmp/ws"), build.kind, "phone 1234",
                                build.registry_wrapper())
    assert files == {wrapper: PurePosixPath(f"/data/local/tmp/ws/{LIB_NAME}")}
    assert env["LD_PRELOAD"] == f"/data/local/tmp/ws/{LIB_NAME}"
    assert env["HARNESS_RUNTIME_VARIANT"] == "fix-model-serialized"


def test_a_recorded_ndk_that_is_gone_falls_back_to_android_ndk(tmp_path, cache, monkeypatch):
    ndk = stand_in_ndk(tmp_path / "ndk-now")
    prefix = stand_in_prefix(tmp_path / "prefix")
    build_dir = tmp_path / "android-build"
    build_dir.mkdir()
    (build_dir / ANDROID_BUILD_RECORD).write_text(json.dumps(
        {"ndk": str(tmp_path / "ndk-moved"), "executorch_prefix": str(prefix), "platform": 30}))
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    with pytest.raises(VariantError, match="ndk-moved is not an Android NDK"):
        wrapper_for_android_build(build_dir)
    monkeypatch.setenv("ANDROID_NDK", str(ndk))
    assert wrapper_for_android_build(build_dir).is_file()


# ------------------------------------------------------------------------- (d)


def _map_levels(*maps: Path) -> dict[str, int]:
    """Symbol -> the API level bionic's version script says it was introduced in (21 for the
    base set, which has no `introduced=`)."""
    levels: dict[str, int] = {}
    for path in maps:
        for line in path.read_text().splitlines():
            m = re.match(r"\s+([A-Za-z_][A-Za-z0-9_]*);(.*)", line)
            if m:
                level = re.search(r"introduced=(\d+)", m.group(2))
                levels.setdefault(m.group(1), int(level.group(1)) if level else 21)
    return levels


def test_the_source_compiles_for_android_against_bionic(tmp_path):
    """A real compile (no link) of the wrapper for aarch64-linux-android30 with clang and libc++
    headers, against bionic's own headers (HARNESS_BIONIC_LIBC: a checkout's libc/, e.g. of
    platform_bionic) and the wheel's ExecuTorch headers; every C symbol the object imports is
    exported by bionic's libc or libdl at API level 30 or lower."""
    bionic = os.environ.get("HARNESS_BIONIC_LIBC")
    clang = shutil.which("clang++") or next(
        (p for p in (shutil.which(f"clang++-{v}") for v in range(21, 13, -1)) if p), None)
    if not bionic or clang is None:
        pytest.skip("needs clang++ and HARNESS_BIONIC_LIBC (bionic's libc/ with include/ and "
                    "kernel/): not on CI")
    libc = Path(bionic)
    llvm = Path(os.path.realpath(clang)).parent.parent
    libcxx = llvm / "include" / "c++" / "v1"
    resource = Path(subprocess.run([clang, "-print-resource-dir"], capture_output=True,
                                   text=True, check=True).stdout.strip())
    wheel = executorch_package_dir()
    if not libcxx.is_dir() or wheel is None:
        pytest.skip(f"needs libc++ headers ({libcxx}) and the executorch wheel")
    # The NDK generates this header; its numbers only matter to code that tests them.
    (tmp_path / "android").mkdir()
    (tmp_path / "android" / "ndk-version.h").write_text(
        "#pragma once\n#define __NDK_MAJOR__ 27\n#define __NDK_MINOR__ 2\n"
        "#define __NDK_BETA__ 0\n#define __NDK_BUILD__ 0\n#define __NDK_CANARY__ 0\n")
    obj = tmp_path / "wrapper.o"
    include = wheel / "include"
    cmd = [clang, "--target=aarch64-linux-android30", "-c", "-O2", "-fPIC", "-Wall", "-Werror",
           "-std=c++17", "-nostdinc", "-nostdinc++",
           "-isystem", str(libcxx), "-isystem", str(resource / "include"),
           "-isystem", str(tmp_path), "-isystem", str(libc / "include"),
           "-isystem", str(libc / "kernel" / "uapi"),
           "-isystem", str(libc / "kernel" / "uapi" / "asm-arm64"),
           "-isystem", str(libc / "kernel" / "android" / "uapi"),
           "-DC10_USING_CUSTOM_GENERATED_MACROS", "-DET_EVENT_TRACER_ENABLED",
           f"-I{include}", f"-I{include / 'executorch/runtime/core/portable_type/c10'}",
           "-o", str(obj), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ELF 64-bit" in subprocess.run(["file", str(obj)], capture_output=True,
                                          text=True).stdout
    nm = shutil.which("llvm-nm") or str(llvm / "bin" / "llvm-nm")
    undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True,
                               check=True).stdout.split()
    c_imports = {s for s in undefined if s != "U" and not s.startswith("_Z")
                 and not s.startswith(("__cxa_", "_Unwind_", "__gxx_")) and s != "__dso_handle"}
    levels = _map_levels(libc / "libc.map.txt", libc.parent / "libdl" / "libdl.map.txt")
    missing = sorted(s for s in c_imports if s not in levels)
    too_new = sorted(f"{s} ({levels[s]})" for s in c_imports if levels.get(s, 0) > 30)
    assert c_imports and not missing and not too_new, (missing, too_new)
