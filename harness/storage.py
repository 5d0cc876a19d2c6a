"""Whether a failed run met a full disk: one reading of the free space where the run writes,
taken only after a run failed, so that a disk that filled mid-run is named (ENOSPC) in the
verdict instead of leaving a bare "the run did not finish".

A filesystem counts as full when less than `FULL_KB` is available: a runner's scenario file,
trace and output need a few hundred kilobytes, and a phone's reserved blocks are not usable by
the shell user.
"""

from __future__ import annotations

import os
from pathlib import Path

FULL_KB = 512


def full_note(where: str, available_kb: int, total_kb: int) -> str:
    """The verdict's words for a full filesystem ("" when it is not full)."""
    if available_kb >= FULL_KB:
        return ""
    return (f"the storage holding {where} is full (ENOSPC: {available_kb} kB free of "
            f"{total_kb} kB), so the run could not write its files; free space and run again")


def parse_df(output: str) -> tuple[int, int] | None:
    """(available kB, total kB) from `df -k PATH` (toybox on Android, coreutils on Linux); None
    when the output is not df's."""
    lines = [l.split() for l in output.strip().splitlines() if l.strip()]
    if len(lines) < 2 or not lines[0] or lines[0][0] != "Filesystem":
        return None
    row = lines[-1] if len(lines[-1]) >= 5 else [t for line in lines[1:] for t in line]  # a long name wraps
    numbers = [t for t in row[1:] if t.isdigit()]
    if len(numbers) < 3:
        return None
    total, _used, available = (int(n) for n in numbers[:3])
    return available, total


def host_full_note(path: Path) -> str:
    """full_note for the host filesystem holding `path` ("" when it is not full or unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return ""
    return full_note(str(path), st.f_bavail * st.f_frsize // 1024, st.f_blocks * st.f_frsize // 1024)
