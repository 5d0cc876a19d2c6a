"""What an Android device gets for its runner build: the runner, the runtime's libraries and,
where its runtime has QNN, the interposer and the QNN libraries of the resolved HTP arch
(`qnn_device_libraries`, or the simulator's `qnn_simulator_libraries` on an x86_64 device)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

from harness.devices.adb.identify import LOOPBACK_PRODUCT, DeviceIdentity
from harness.devices.payload import (Payload, qnn_sdk_libraries, qnn_simulator_libraries,
                                     with_dlopen_shim)
from harness.errors import DeviceError
from harness.qnn import dsp_heap
from harness.runner.select import DeviceBuild
from harness.runtime.variants import device_preload


def qnn_device_libraries(sdk_root: Path, htp_arch: int,
                         workspace: PurePosixPath) -> dict[Path, PurePosixPath]:
    """The QAIRT SDK's arm64 Android libraries for HTP v`htp_arch` -> where they go in the
    workspace (`qnn_sdk_libraries` of lib/aarch64-android)."""
    return qnn_sdk_libraries(Path(sdk_root), "aarch64-android", htp_arch, workspace)


def qnn_libraries(abi: str, htp_arch: int, workspace: PurePosixPath, *, sdk_root: str | None,
                  simulator_lib_dir: Callable[[], Path]) -> dict[Path, PurePosixPath]:
    """The QNN libraries a device of `abi` gets: the simulator's on x86_64 (`simulator_lib_dir`
    is only called then), else the SDK's at `sdk_root` (QNN_SDK_ROOT) for the HTP arch."""
    if abi == "x86_64":
        return qnn_simulator_libraries(simulator_lib_dir(), workspace)
    if not sdk_root:
        raise DeviceError("set QNN_SDK_ROOT to a QAIRT SDK: its lib/aarch64-android and "
                          "lib/hexagon-v<arch> libraries are pushed to the device")
    return qnn_device_libraries(Path(sdk_root), htp_arch, workspace)


def device_payload(identity: DeviceIdentity, build: DeviceBuild, htp_arch: int,
                   workspace: PurePosixPath, *, sdk_root: str | None,
                   simulator_lib_dir: Callable[[], Path], dsp_heap_setting: str = "auto") -> Payload:
    """The files and run variables for `build` on this device. On an arm64 phone the harness's
    interposer takes the name libQnnHtp.so in the workspace (first on LD_LIBRARY_PATH) and the
    SDK's real library goes to `qnn/`, so the QNN call trace works there as on the simulator,
    and the interposer reads the DSP heap (`dsp_heap_setting`, harness.qnn.dsp_heap.wanted).
    On every device whose runtime has QNN the build's dlopen shim is preloaded into the runner
    (`with_dlopen_shim`), so the runtime's dlopens are traced and can be failed there too."""
    if build.kind == "arm64-linux" and identity.product != LOOPBACK_PRODUCT:
        raise DeviceError(
            f"{identity.serial} is an arm64 Android device, and the only arm64 runner here is the "
            "arm64-linux (glibc) build: build the Android one with `python -m harness "
            "build-runner --android --ndk <ndk> --executorch-prefix <prefix>` and set "
            "EXECUTORCH_HIL_ANDROID_BUILD to the directory it prints")
    files = {lib: workspace / lib.name for lib in build.libraries()}
    # the session's runtime variant: its backend-registry wrapper preloaded into every run
    wrapper, env = device_preload(workspace, build.kind, identity.serial,
                                  build.registry_wrapper())
    files.update(wrapper)
    if not build.has_backend("QnnBackend"):
        return Payload(build.runner, files, env, build.backends, dsp_heap.NO_QNN_NOTE)
    qnn = qnn_libraries(identity.abi, htp_arch, workspace, sdk_root=sdk_root,
                        simulator_lib_dir=simulator_lib_dir)
    interposer = build.interposer
    android_htp = identity.abi != "x86_64" and interposer is not None
    if android_htp and interposer is not None:  # (the second test only narrows the type)
        from harness.qnn.sdk import bridge_environment

        real = workspace / "qnn" / "libQnnHtp.so"
        qnn = {src: (real if dst.name == "libQnnHtp.so" else dst) for src, dst in qnn.items()}
        files[interposer] = workspace / "libQnnHtp.so"
        env.update({"HARNESS_QNN_REAL_HTP": str(real), **bridge_environment("auto")})
    with_dlopen_shim(build.dlopen_shim, workspace, files, env)
    on = dsp_heap.wanted(dsp_heap_setting, android_htp=android_htp)
    env[dsp_heap.ENV] = "1" if on else "0"
    files.update(qnn)
    return Payload(build.runner, files, env, build.backends,
                   dsp_heap.note(on, android_htp=android_htp))
