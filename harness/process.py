"""Runs a child process with a timeout that kills its whole process group.

A hung runner must not hang the session: on timeout the group gets SIGKILL and whatever the
child printed so far is still returned for the report.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from pathlib import Path


@dataclasses.dataclass
class ProcessOutput:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool


def run_process(cmd: list[str], env: dict[str, str], timeout: float,
                cwd: Path | None = None) -> ProcessOutput:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return ProcessOutput(proc.returncode, _text(out), _text(err), False)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return ProcessOutput(None, _text(out), _text(err), True)


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")
