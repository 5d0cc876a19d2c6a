"""Host processes as the framework's tests look at them: the loopback device runs what is
pushed to it as host processes, so a test can see whether a runner it killed is gone."""

from __future__ import annotations

import time
from pathlib import Path


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(") ", 1)[1][0] != "Z"


def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    """Whether the process stopped running within `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not running(pid):
            return True
        time.sleep(0.05)
    return False
