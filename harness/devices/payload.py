"""What a device gets pushed for its runner build, shared by every device kind that pushes
files: the payload (runner, libraries, run variables, backends) and push counts."""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath

from harness.qnn import dsp_heap


def qnn_simulator_libraries(lib_dir: Path, workspace: PurePosixPath) -> dict[Path, PurePosixPath]:
    """The host's simulator libraries, for an x86_64 device (the loopback stand-in)."""
    return {lib_dir / n: workspace / n for n in ("libQnnHtp.so", "libQnnSystem.so")}


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
