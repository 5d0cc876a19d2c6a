"""`harness-runner --serve` on an adb device: scenarios as forks of a runner that has loaded
its libraries once, over one shell stream held open for the session.

A new runner process per scenario pays for loading the runtime and the QNN libraries every
time (on the loopback stand-in the simulator's 106 MB libQnnHtp.so: about 20 ms a scenario,
benchmarks/adb_path.py). The server is the one the simulator uses (docs/runner-protocol.md,
"Fork server"), started by `adb shell` in the workspace's `runs/` directory with the
variables a run's command would give the runner; each request names its run directory
relative to it, because a device maps its paths in commands, never inside what a command
reads (the loopback stand-in rewrites `/data` in command text only).

One request per scenario carries all a run needs, so a scenario stays one round trip: the
run directory (created), the scenario file (written unless the content-named directory holds
it already), the trace to empty, the pid file (for a later session to kill a leftover run),
the per-run variables on top of the server's, and which files to send back with the exit
status (the runner's stdout and stderr, the QNN trace).
"""

from __future__ import annotations

import json
import logging
import select

from harness.devices.adb.transport import AdbError, AdbProxy
from harness.devices.shell_device import ServedRunner
from harness.runner.fork_server import ForkServerError


class DeviceForkServer(ServedRunner):
    """One `harness-runner --serve` on a device; one scenario at a time (an adb device runs
    its scenarios one after another)."""

    where = "the device's fork server"

    def __init__(self, adb: AdbProxy, command: str,
                 log: logging.LoggerAdapter | logging.Logger) -> None:
        super().__init__()
        self.log = log
        try:
            self.stream = adb.stream(command, stdin=None)
        except AdbError as exc:
            raise ForkServerError(f"cannot start the fork server: {exc}") from exc
        self._await_ready()

    def send(self, request: dict) -> None:
        try:
            self.stream.send((json.dumps(request) + "\n").encode())
        except OSError as exc:
            self.stream.closed = True
            raise ForkServerError(f"the device's fork server is gone ({exc})") from exc

    @property
    def ended(self) -> bool:
        return self.stream.closed

    def _exit_text(self) -> str:
        return f"exit {self.stream.exit_code}"

    def _pump(self, timeout: float) -> None:
        """Take what the stream brings within `timeout` (replies, the server's log, its end)."""
        try:
            out, err = self.stream.read(timeout)
        except TimeoutError:
            return
        except OSError as exc:
            self.stream.closed = True
            raise ForkServerError(f"the stream to the device's fork server was cut "
                                  f"({exc or type(exc).__name__})") from exc
        self._lines += out
        self._log(err)

    @property
    def alive(self) -> bool:
        """Whether the server is still there, from what its stream brought without waiting:
        between scenarios it writes nothing but log lines, so an end of the stream here is a
        server that died idle (killed on the device), which the next scenario must not meet."""
        try:
            while not self.stream.closed and select.select([self.stream.socket], [], [], 0)[0]:
                self._pump(0.5)
        except (ForkServerError, OSError, ValueError):
            self.stream.closed = True
        return not self.stream.closed

    def close(self) -> None:
        """Close the stream: the server reads the end of its stdin and exits (the loopback
        device's adbd also kills its process group; a phone's closes its stdin)."""
        self.stream.close()
        self.stream.closed = True
