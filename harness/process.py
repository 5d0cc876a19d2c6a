"""Runs a child process with a timeout that kills its whole process group, keeping at most the
output limit of what it prints (`harness.output_limit`).

A hung runner must not hang the session: on timeout the group gets SIGKILL and whatever the
child printed so far is still returned for the report. A process that left the group
(`setsid`) and still holds the output pipes does not hold the session either: after the kill
the pipes are read for `DRAIN_S` more at most.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, AnyStr

from harness.output_limit import CappedBuffer, limit_bytes, note

DRAIN_S = 5.0


def piped(stream: IO[AnyStr] | None) -> IO[AnyStr]:
    """A child's pipe (`subprocess.PIPE`); its type says it may be None, which it is only
    when the child was started without that pipe."""
    if stream is None:
        raise ValueError("the process was started without this pipe")
    return stream


@dataclasses.dataclass
class ProcessOutput:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    notes: list[str] = dataclasses.field(default_factory=list)  # e.g. the output limit


def run_process(cmd: list[str], env: dict[str, str], timeout: float,
                cwd: Path | None = None) -> ProcessOutput:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    limit = limit_bytes()
    buffers = {"stdout": CappedBuffer(limit), "stderr": CappedBuffer(limit)}
    timed_out = _read_until_exit(proc, buffers, time.monotonic() + timeout)
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _read_until_exit(proc, buffers, time.monotonic() + DRAIN_S, wait=False)
    for stream in (proc.stdout, proc.stderr):
        piped(stream).close()
    returncode = None if timed_out else proc.wait()
    if timed_out:
        proc.wait()
    notes = [note(name, b.total, limit) for name, b in buffers.items() if b.truncated]
    return ProcessOutput(returncode, buffers["stdout"].text(), buffers["stderr"].text(),
                         timed_out, notes)


def _read_until_exit(proc: subprocess.Popen[bytes], buffers: dict[str, CappedBuffer],
                     deadline: float, wait: bool = True) -> bool:
    """Read both pipes into `buffers` until they close (True when `deadline` came first).
    With `wait`, a closed pair of pipes also waits for the process to exit."""
    selector = selectors.DefaultSelector()
    for name, stream in (("stdout", piped(proc.stdout)), ("stderr", piped(proc.stderr))):
        if not stream.closed:
            try:
                selector.register(stream, selectors.EVENT_READ, name)
            except (ValueError, KeyError):
                pass
    try:
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            for key, _ in selector.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    buffers[key.data].feed(chunk)
                else:
                    selector.unregister(key.fileobj)
    finally:
        selector.close()
    if wait:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return True
    return False


def kill_by_environment(name: str, value: str) -> list[int]:
    """SIGKILL every process of this host whose environment holds `name=value` (a run's own
    trace file: every process a runner started inherits it, also one that left its process
    group with `setsid`); returns their pids. This process is never one of them."""
    needle = f"{name}={value}".encode() + b"\0"
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if environ.startswith(needle) or b"\0" + needle in environ:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except OSError:
                pass
    return killed

