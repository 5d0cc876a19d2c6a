"""Chooses the runner for a session: native by default, Python when no native build is possible.

The native runner starts in about 0.1 s where a Python process spends over a second importing,
and every scenario is a fresh process, so native is the default wherever it can be built.

`device_build(abi)` is the one place that decides which build a device of an ABI gets (the
runner, the QNN interposer and the libraries to push with them); see its docstring.
"""

from __future__ import annotations

from collections.abc import Callable

import dataclasses
import os
import sys
from pathlib import Path

from harness.errors import DeviceError, HarnessError
from harness.runner.crash_report_build import build_crash_report
from harness.runner.builds.cmake import (
    COMPONENTS_FILE,
    DLOPEN_SHIM_NAME,
    INTERPOSER_NAME,
    RUNNER_NAME,
    build_backends,
)

RUNNERS = ("auto", "native", "python")
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class RunnerChoice:
    kind: str  # "native" or "python"
    binary: Path | None  # the native runner binary
    notice: str = ""  # one line for the session header when we fell back
    argv: tuple[str, ...] = ()  # an explicit command prefix (tests use it for stand-ins)

    def command(self, scenario: str) -> list[str]:
        if self.argv:
            return [*self.argv, scenario]
        if self.kind == "native":
            return [str(self.binary), scenario]
        return [sys.executable, "-m", "harness.runner.python_runner", scenario]

    def fork_server_command(self) -> Path | tuple[str, ...]:
        """What starts this runner's fork server: the native binary (`--serve`), or the
        Python runner's server module."""
        if self.kind == "native":
            assert self.binary is not None  # a native choice always has its binary
            return self.binary
        # Not `-m`: that puts the working directory first on sys.path, so run from another
        # checkout it would import that checkout's harness.
        return (sys.executable, "-c", f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); "
                "from harness.runner.python_fork_server import main; sys.exit(main(sys.argv[1:]))")

    def environment(self) -> dict[str, str]:
        """What a runner process of this choice needs beyond the QNN libraries: the Python
        runner's path and crash reporter, and for either runner the session's runtime variant
        (harness.runtime.variants: its wrapper first among the preloads)."""
        from harness.runtime.variants import runner_environment

        own = self._own_environment()
        variant = runner_environment()
        if "LD_PRELOAD" in own and "LD_PRELOAD" in variant:
            # Both put the inherited preloads last; the wrapper goes first, then the rest.
            wrapper = variant["LD_PRELOAD"].split(" ")[0]
            variant["LD_PRELOAD"] = f"{wrapper} {own['LD_PRELOAD']}"
        return {**own, **variant}

    def _own_environment(self) -> dict[str, str]:
        if self.kind == "python":
            from harness.runtime import current

            from harness.runner.python_fork_server import SINGLE_THREAD_ENV

            own = current().python_path  # the runtime under test's package, before any other
            path = os.environ.get("PYTHONPATH", "")
            env = {"PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), str(own) if own else "", path) if p),
                **SINGLE_THREAD_ENV}
            # The crashing thread's frames on stderr before a signal kills the process, as
            # the native runner writes them (harness.results.crash_site reads them).
            reporter = build_crash_report()
            if reporter is not None:
                env["LD_PRELOAD"] = " ".join(
                    p for p in (str(reporter), os.environ.get("LD_PRELOAD", "")) if p)
            return env
        return {}


def choose_runner(requested: str) -> RunnerChoice:
    if requested not in RUNNERS:
        raise HarnessError(f"--runner must be one of {', '.join(RUNNERS)}, not {requested!r}")
    if requested == "python":
        return RunnerChoice("python", None)
    from harness.runner.builds import RunnerBuildError, host

    available, why = host.host_runner_available()
    if not available:
        if requested == "native":
            raise HarnessError(f"--runner=native: the native runner cannot be built here: {why}")
        return RunnerChoice("python", None, f"native runner unavailable ({why}); using the Python runner")
    try:
        return RunnerChoice("native", host.build_host_runner())
    except RunnerBuildError as exc:
        if requested == "native":
            raise HarnessError(f"--runner=native: {exc}") from exc
        first = str(exc).splitlines()[0]
        log = next((line[len("build log: "):] for line in str(exc).splitlines()
                    if line.startswith("build log: ")), "")
        why = f"{exc.reason}; " if exc.reason else ""
        where = f"; build log: {log}" if log else ""
        return RunnerChoice("python", None, f"native runner build failed: {why}{first}{where}; "
                                            "using the Python runner")


# --------------------------------------------------------------------------- device builds

ANDROID_BUILD_ENV = "EXECUTORCH_HIL_ANDROID_BUILD"
"""A directory printed by `python -m harness build-runner --android`: the runner, the
interposer, and lib/ with the ExecuTorch shared libraries."""

ARM64_ABIS = ("arm64-v8a", "aarch64")  # Android's name, and Linux's (uname -m)


@dataclasses.dataclass(frozen=True)
class DeviceBuild:
    """What a device of one ABI runs: push `runner`, `interposer` (as libQnnHtp.so, ahead of
    the real one on the library path), `dlopen_shim` (preloaded into every run, as on the
    simulator) and every shared library in `lib_dirs`."""

    abi: str
    runner: Path
    interposer: Path | None  # the QNN interposer built for this ABI; None when there is none
    lib_dirs: tuple[Path, ...]  # directories whose .so files the runner needs on the device
    backends: tuple[str, ...]  # what this runtime registers (`harness-runner --list-backends`)
    kind: str  # "host", "arm64-linux" or "android"
    # The interposer's dlopen shim built for this ABI (harness.qnn.interposer_build); None when
    # there is none (an Android build made before the shim was part of it).
    dlopen_shim: Path | None = None

    def libraries(self) -> tuple[Path, ...]:
        """The shared libraries to push next to the runner (every .so in `lib_dirs`)."""
        found: dict[str, Path] = {}
        for directory in self.lib_dirs:
            for path in sorted(directory.glob("*.so*")):
                if path.is_file() and path.name not in found:
                    found[path.name] = path
        return tuple(found.values())

    def has_backend(self, name: str) -> bool:
        return name in self.backends

    def registry_wrapper(self) -> Callable[[], Path] | None:
        """What builds `--runtime-variant`'s wrapper for a build other than the host's: the
        arm64-linux build's is cross-compiled against the aarch64 wheel, the Android build's
        with the NDK and prefix its runner was built with (harness-android-build.json)."""
        if self.kind == "arm64-linux":
            from harness.runner.builds.arm64_linux import build_arm64_wrapper

            return build_arm64_wrapper
        if self.kind == "android":
            from harness.runner.builds.android import wrapper_for_android_build

            directory = self.runner.parent
            return lambda: wrapper_for_android_build(directory)
        return None


def device_build(abi: str) -> DeviceBuild:
    """The build for a device of ABI `abi` (its `ro.product.cpu.abi`), built on first use.

    - "x86_64": the host build (`choose_runner("native")`), with the host interposer. It finds
      the executorch wheel's libraries by its RUNPATH, so no libraries are pushed (x86_64 adb
      devices are stand-ins on this host: the loopback device).
    - "arm64-v8a" (or "aarch64"):
        1. `$EXECUTORCH_HIL_ANDROID_BUILD` set: the Android build in that directory (made by
           `build-runner --android`), kind "android";
        2. else, with the aarch64-linux-gnu cross toolchain installed: the arm64-linux build
           (`build-runner --arm64-linux`, cached), kind "arm64-linux". It is a glibc program
           without QNN: for the loopback device's arm64 mode (qemu) and arm64 Linux machines,
           not for an Android phone;
        3. else a DeviceError saying how to get either.
    - anything else: DeviceError.
    A failed build is a DeviceError carrying the build's message.
    """
    from harness.runner.builds import RunnerBuildError, aarch64_wheel, android, arm64_linux

    if abi == "x86_64":
        choice = choose_runner("native")
        if choice.binary is None:
            raise DeviceError(f"no native host runner for an x86_64 device ({choice.notice})")
        from harness.qnn.interposer_build import build_dlopen_shim, build_interposer

        return DeviceBuild(abi, choice.binary, build_interposer(), (),
                           _backends(choice.binary.parent), "host", build_dlopen_shim())
    if abi not in ARM64_ABIS:
        raise DeviceError(f"no runner build for a device of ABI {abi!r}: the harness builds "
                          "for x86_64 (host) and arm64-v8a (Android or arm64-linux)")
    directory = os.environ.get(ANDROID_BUILD_ENV)
    if directory:
        return _android_build(abi, Path(directory).expanduser())
    from harness.runtime import current

    runtime = current()
    if runtime.from_prefix and runtime.machine == "android-aarch64":
        # --executorch-prefix built for Android: the runner is built against it (cached).
        ndk = os.environ.get("ANDROID_NDK")
        if not ndk:
            raise DeviceError(f"--executorch-prefix {runtime.path} is an Android build: set "
                              "ANDROID_NDK to the NDK the runner is built with against it")
        # An Android prefix is recognised by its CMake package and libraries.
        assert runtime.cmake_prefix is not None and runtime.lib_dir is not None
        try:
            built = android.android_prefix_build(runtime.cmake_prefix, runtime.lib_dir,
                                                 Path(ndk))
        except RunnerBuildError as exc:
            raise DeviceError(f"the Android build against {runtime.path} failed: {exc}") from exc
        return _android_build(abi, built)
    ok, why = arm64_linux.arm64_linux_available()
    if not ok:
        raise DeviceError(
            f"a device of ABI {abi} needs an arm64 runner and none is available: {why}. "
            "For an Android phone build one with `python -m harness build-runner --android "
            "--ndk <ndk> --executorch-prefix <arm64-v8a ExecuTorch install prefix>` and set "
            f"{ANDROID_BUILD_ENV} to the directory it prints; for the loopback device's arm64 "
            f"mode install the cross toolchain (apt-get install {arm64_linux.CROSS_PACKAGES}) "
            "and the arm64-linux build is made on first use")
    try:
        build_dir = arm64_linux.build_arm64_linux()
        lib_dir = aarch64_wheel.aarch64_executorch_dir() / "lib"
    except RunnerBuildError as exc:
        raise DeviceError(f"the arm64-linux build for a device of ABI {abi} failed: {exc}") from exc
    return DeviceBuild(abi, build_dir / RUNNER_NAME, build_dir / INTERPOSER_NAME, (lib_dir,),
                       _backends(build_dir), "arm64-linux", build_dir / DLOPEN_SHIM_NAME)


def _android_build(abi: str, directory: Path) -> DeviceBuild:
    runner = directory / RUNNER_NAME
    if not runner.is_file():
        raise DeviceError(
            f"{ANDROID_BUILD_ENV}={directory} holds no {RUNNER_NAME}: set it to the "
            "directory `python -m harness build-runner --android ...` prints")
    interposer, shim = directory / INTERPOSER_NAME, directory / DLOPEN_SHIM_NAME
    lib_dir = directory / "lib"
    return DeviceBuild(abi, runner, interposer if interposer.is_file() else None,
                       (lib_dir,) if lib_dir.is_dir() else (),
                       build_backends(directory), "android", shim if shim.is_file() else None)


def _backends(build_dir: Path) -> tuple[str, ...]:
    """From the build's configure (harness-runner-components.txt); a build older than that
    file is asked with --list-backends (it runs on this host)."""
    found = build_backends(build_dir)
    if found or (build_dir / COMPONENTS_FILE).is_file():
        return found
    import subprocess

    try:
        out = subprocess.run([str(build_dir / RUNNER_NAME), "--list-backends"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(out.stdout.split()) if out.returncode == 0 else ()
