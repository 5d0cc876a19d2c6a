"""What a device gets pushed for its runner build, shared by every device kind that pushes
files: the payload (runner, libraries, run variables, backends) and push counts."""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath

from harness.errors import DeviceError
from harness.qnn import dsp_heap


def qnn_sdk_libraries(root: Path, target: str, htp_arch: int,
                      dest: PurePosixPath) -> dict[Path, PurePosixPath]:
    """The QAIRT SDK's libraries for HTP v`htp_arch` -> where they go below `dest`:
    `lib/<target>/{libQnnHtp,libQnnSystem,libQnnHtpV<arch>Stub}.so` (target: aarch64-android
    for a phone, an aarch64 Linux one for a board) and
    `lib/hexagon-v<arch>/unsigned/libQnnHtpV<arch>Skel.so`. A missing file is a DeviceError
    naming every missing one, because a device without its Skel fails only at the first load."""
    host = root / "lib" / target
    files = {host / "libQnnHtp.so": dest / "libQnnHtp.so",
             host / "libQnnSystem.so": dest / "libQnnSystem.so",
             host / f"libQnnHtpV{htp_arch}Stub.so": dest / f"libQnnHtpV{htp_arch}Stub.so",
             root / "lib" / f"hexagon-v{htp_arch}" / "unsigned" / f"libQnnHtpV{htp_arch}Skel.so":
                 dest / f"libQnnHtpV{htp_arch}Skel.so"}
    missing = [str(p) for p in files if not p.is_file()]
    if missing:
        raise DeviceError(f"QNN SDK at {root} lacks {', '.join(missing)} (HTP v{htp_arch})")
    return files


def qnn_simulator_libraries(lib_dir: Path, workspace: PurePosixPath) -> dict[Path, PurePosixPath]:
    """The host's simulator libraries, for an x86_64 device (the loopback stand-in)."""
    return {lib_dir / n: workspace / n for n in ("libQnnHtp.so", "libQnnSystem.so")}


def with_dlopen_shim(shim: Path | None, workspace: PurePosixPath,
                     files: dict[Path, PurePosixPath], env: dict[str, str]) -> None:
    """Add the build's dlopen shim (harness/qnn/interposer.c built with -DHARNESS_DLOPEN_SHIM)
    to `files` and put it first among the preloads of `env`, as the simulator preloads it into
    its runners: the runtime's dlopen of each QNN library is traced and open to nemesis rules
    (`dlopen.libQnnHtp.so`, ...) on every device kind. Nothing for a build without one."""
    if shim is None:
        return
    on_device = workspace / shim.name
    files[shim] = on_device
    env["LD_PRELOAD"] = " ".join(p for p in (str(on_device), env.get("LD_PRELOAD", "")) if p)


@dataclasses.dataclass(frozen=True)
class Payload:
    """What a device gets for its build: the runner, the runtime's shared libraries, the QNN
    libraries (none when the device's runtime has no QNN backend) and the variables its runs
    need (the interposer's, on a phone)."""

    runner: Path
    files: dict[Path, PurePosixPath]
    env: dict[str, str]
    backends: tuple[str, ...]
    dsp_heap_note: str = ""

    @property
    def dsp_heap(self) -> bool:
        """Runs ask QNN for DSP heap readings (the interposer's setting)."""
        return dsp_heap.requested(self.env)


@dataclasses.dataclass
class PushStats:
    pushed: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"pushed": self.pushed, "skipped": self.skipped}
