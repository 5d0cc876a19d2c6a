"""What a Linux board gets for its runner build (the adb kind's `device_payload`, for glibc
boards): the runner, the runtime's libraries, the QNN libraries, the interposer and its dlopen
shim (preloaded into every run, as on the simulator).

- x86_64 board (CI's localhost sshd): the host build, run on the board as the board's user.
  Its RUNPATH names the host's executorch wheel, which a board (or another user of this host)
  does not have, so the runtime's libraries go next to the runner (`$ORIGIN` comes first).
  QNN is the HTP simulator's: the interposer as `libQnnHtp.so` in the workspace, the real
  simulator libraries and their private libc++ in `qnn/` (HARNESS_QNN_REAL_HTP), as the
  simulator device lays them out on the host.
- aarch64 board: the arm64-linux build (`build-runner --arm64-linux`) and, when that build has
  the QNN backend, the SDK's Linux libraries (`$QNN_SDK_ROOT/lib/<aarch64 Linux target>`,
  default the first `aarch64-oe-linux-gcc*` or `aarch64-ubuntu-gcc*` there) with the Skel of
  the SoC's HTP arch.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from collections.abc import Callable

from harness.qnn import dsp_heap
from harness.devices.payload import Payload, qnn_sdk_libraries, with_dlopen_shim
from harness.errors import DeviceError
from harness.qnn.sdk import QnnSdk
from harness.runner.select import DeviceBuild
from harness.runtime.variants import device_preload

LINUX_TARGET_ENV = "EXECUTORCH_HIL_QNN_LINUX_TARGET"  # e.g. aarch64-oe-linux-gcc11.2
SIMULATOR_LIBS = ("libQnnHtp.so", "libQnnSystem.so", "libQnnHtpPrepare.so")
QNN_DIR = "qnn"


def board_payload(machine: str, build: DeviceBuild, htp_arch: int, workspace: PurePosixPath,
                  *, sdk: Callable[[], QnnSdk], sdk_root: str | None,
                  dsp_heap_setting: str = "auto") -> Payload:
    """The files (local -> board path) and run variables of `build` on a board of `machine`."""
    files = {lib: workspace / lib.name for lib in build.libraries()}
    # the session's runtime variant: its backend-registry wrapper preloaded into every run
    wrapper, variant_env = device_preload(workspace, build.kind, f"the {machine} board",
                                          build.registry_wrapper())
    files.update(wrapper)
    if build.kind == "host":
        from harness.runtime import current

        lib_dir = current().lib_dir
        if lib_dir is not None:
            files.update({p: workspace / p.name for p in sorted(lib_dir.glob("*.so*"))
                          if p.is_file()})
    if not build.has_backend("QnnBackend"):
        return Payload(build.runner, files, variant_env, build.backends, dsp_heap.NO_QNN_NOTE)
    qnn = workspace / QNN_DIR
    if machine == "x86_64":
        host = sdk()
        for name in SIMULATOR_LIBS:
            source = (host.real_lib_dir / name if name == "libQnnHtp.so"
                      else (host.lib_dir / name).resolve())
            if source.is_file():
                files[source] = qnn / name
        for extra in host.extra_lib_dirs:
            files.update({p: qnn / p.name for p in sorted(extra.glob("*.so*")) if p.is_file()})
        if build.interposer is not None:
            files[build.interposer] = workspace / "libQnnHtp.so"
    else:
        files.update(linux_qnn_libraries(sdk_root, htp_arch, qnn))
        if build.interposer is not None:
            files[build.interposer] = workspace / "libQnnHtp.so"
    from harness.qnn.sdk import bridge_environment

    env = {**variant_env, "HARNESS_QNN_REAL_HTP": str(qnn / "libQnnHtp.so"),
           **bridge_environment("auto")}
    with_dlopen_shim(build.dlopen_shim, workspace, files, env)  # as the simulator preloads it
    on = dsp_heap.wanted(dsp_heap_setting, android_htp=False)
    env[dsp_heap.ENV] = "1" if on else "0"
    return Payload(build.runner, files, env, build.backends,
                   dsp_heap.note(on, android_htp=False))


def linux_qnn_libraries(sdk_root: str | None, htp_arch: int,
                        qnn: PurePosixPath) -> dict[Path, PurePosixPath]:
    """The QAIRT SDK's aarch64 Linux libraries for HTP v`htp_arch`; DeviceError naming what
    is missing (a board without its Skel fails only at the first load)."""
    if not sdk_root:
        raise DeviceError("set QNN_SDK_ROOT to a QAIRT SDK: its aarch64 Linux libraries "
                          "(lib/aarch64-oe-linux-gcc*) and hexagon-v<arch> Skel are pushed")
    root = Path(sdk_root)
    target = os.environ.get(LINUX_TARGET_ENV) or next(
        (p.name for pattern in ("aarch64-oe-linux-gcc*", "aarch64-ubuntu-gcc*")
         for p in sorted((root / "lib").glob(pattern))), "")
    if not target:
        raise DeviceError(f"QNN SDK at {root} has no lib/aarch64-oe-linux-gcc* or "
                          f"lib/aarch64-ubuntu-gcc*; set {LINUX_TARGET_ENV} to its directory")
    return qnn_sdk_libraries(root, target, htp_arch, qnn)
