"""`harness-runner --serve` on a board, its protocol carried by one multiplexed ssh session's
stdin and stdout (docs/runner-protocol.md, "Fork server"), held open for the session: a
scenario is one request line and its replies, no new ssh session or process start."""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess

from harness.devices.shell_device import ServedRunner
from harness.process import piped
from harness.runner.fork_server import ForkServerError


class BoardForkServer(ServedRunner):
    """One served runner; one scenario at a time (a board runs its scenarios in turn)."""

    where = "the board's fork server"

    def __init__(self, proc: subprocess.Popen[bytes], log: logging.LoggerAdapter | logging.Logger):
        super().__init__()
        self.proc = proc
        self.log = log
        self.closed = False
        self._await_ready()

    def send(self, request: dict) -> None:
        try:
            piped(self.proc.stdin).write((json.dumps(request) + "\n").encode())
            piped(self.proc.stdin).flush()
        except (OSError, ValueError) as exc:
            self.closed = True
            raise ForkServerError(f"the board's fork server is gone ({exc})") from exc

    @property
    def ended(self) -> bool:
        return self.closed

    def _exit_text(self) -> str:
        return f"ssh exit {self.proc.poll()}"

    def _pump(self, timeout: float) -> None:
        streams = [s for s in (self.proc.stdout, self.proc.stderr) if s is not None]
        ready, _, _ = select.select(streams, [], [], timeout)
        for stream in ready:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                if stream is self.proc.stdout:
                    self.closed = True
                    self.proc.wait()
                continue
            if stream is self.proc.stdout:
                self._lines += chunk
            else:
                self._log(chunk)

    @property
    def alive(self) -> bool:
        """Still there, from what its stream brought without waiting (an idle server writes
        nothing but log lines, so an end here is a server or connection that went away)."""
        try:
            while not self.closed and select.select([piped(self.proc.stdout)], [], [], 0)[0]:
                self._pump(0.2)
        except (OSError, ValueError):
            self.closed = True
        return not self.closed and self.proc.poll() is None

    def close(self) -> None:
        """End its stdin: the server reads the end and exits; the ssh client follows."""
        self.closed = True
        try:
            piped(self.proc.stdin).close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
