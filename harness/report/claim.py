"""Which session a `--hil-report DIR` belongs to.

Two sessions given the same DIR overwrote each other's report.html and results.json silently.
A session now claims DIR (`DIR/.hil-session`: its pid, the pid's start time and the host's boot
id, the lease's own rules for "provably alive"); a second session that finds DIR claimed by a
live one writes beside it, to `DIR-<time>-<pid>`, and says so. A claim whose owner is gone (a
finished or killed session) is taken over, so reusing DIR run after run works as before.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from harness.cache import file_lock
from harness.devices.lease import host_boot_id, pid_alive, pid_start

CLAIM = ".hil-session"
REDIRECT_ENV = "EXECUTORCH_HIL_REPORT_DIR"
"""The directory the controller chose, for its xdist workers (they inherit its environment)."""


def _mine() -> dict[str, str]:
    pid = str(os.getpid())
    return {"pid": pid, "start": pid_start(pid), "boot": host_boot_id(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def live_owner(directory: Path) -> dict[str, str] | None:
    """The claim of DIR when its owner is another process alive on this host, else None (no
    claim, an unreadable one, this process's own, or a process that is gone)."""
    try:
        owner = json.loads((directory / CLAIM).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(owner, dict) or not all(isinstance(owner.get(k), str)
                                              for k in ("pid", "start", "boot")):
        return None
    if owner["pid"] == str(os.getpid()) or owner["boot"] != host_boot_id():
        return None  # another boot's pid names no process of this one
    return owner if pid_alive(owner["pid"], owner["start"]) else None


def claim(directory: Path) -> tuple[Path, str]:
    """The directory this session's report goes to, and a notice when it is not `directory`
    (claimed by a live session); the claim written in the one returned."""
    directory.mkdir(parents=True, exist_ok=True)
    with file_lock(directory / f"{CLAIM}.lock"):
        owner = live_owner(directory)
        chosen = directory
        if owner is not None:
            chosen = directory.with_name(
                f"{directory.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
            chosen.mkdir(parents=True, exist_ok=True)
        (chosen / CLAIM).write_text(json.dumps(_mine()) + "\n")
    if owner is None:
        return chosen, ""
    return chosen, (f"--hil-report {directory} belongs to a live session (pid {owner['pid']}, "
                    f"since {owner.get('since', '?')}): this session's report goes beside it, "
                    f"to {chosen}")
