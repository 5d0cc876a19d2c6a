"""`harness-runner --serve` on a board, its protocol carried by one multiplexed ssh session's
stdin and stdout (docs/runner-protocol.md, "Fork server"), held open for the session: a
scenario is one request line and its replies, no new ssh session or process start."""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import time

from harness.process import piped
from harness.runner.fork_server import ForkServerError, is_ready, not_started, parse_reply

START_TIMEOUT_S = 120.0  # loading the libraries on a busy board
REPLY_TIMEOUT_S = 30.0  # for a fork (or a killed fork's end) to be reported
LOG_LIMIT = 16 * 1024


class BoardForkServer:
    """One served runner; one scenario at a time (a board runs its scenarios in turn)."""

    def __init__(self, proc: subprocess.Popen[bytes], log: logging.LoggerAdapter | logging.Logger):
        self.proc = proc
        self.log = log
        self._lines = bytearray()
        self._stderr = bytearray()
        self.closed = False
        ready = self.reply(START_TIMEOUT_S)
        if not is_ready(ready):
            self.close()
            raise not_started("the board's fork server", ready, self.log_tail())
        self.pid = ready["ready"]
        self.preloaded = ready.get("preloaded", [])

    def send(self, request: dict) -> None:
        try:
            piped(self.proc.stdin).write((json.dumps(request) + "\n").encode())
            piped(self.proc.stdin).flush()
        except (OSError, ValueError) as exc:
            self.closed = True
            raise ForkServerError(f"the board's fork server is gone ({exc})") from exc

    def reply(self, timeout: float) -> dict | None:
        """The next reply, None when none came within `timeout`; ForkServerError when the
        stream ended (the server exited, the connection dropped)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._lines:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self.closed:
                raise ForkServerError(f"the board's fork server ended (ssh exit "
                                      f"{self.proc.poll()}); its log: {self.log_tail()}")
            self._pump(min(left, 5.0))
        line, _, rest = bytes(self._lines).partition(b"\n")
        self._lines = bytearray(rest)
        return parse_reply(line, "the board's fork server")

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
                self._stderr = (self._stderr + chunk)[-LOG_LIMIT:]

    def log_tail(self, limit: int = 2000) -> str:
        return self._stderr.decode("utf-8", "replace")[-limit:].strip() or "(empty)"

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
