"""Runs scenarios as forks of a native runner that has already loaded its libraries.

`harness-runner --serve --preload LIB...` (harness/runner/native/fork_server.cpp) loads the
runtime and the QNN libraries once, creates nothing, and forks a child per scenario, so each
scenario still starts with an empty delegate cache and fresh process-global state but skips
the tens of milliseconds the simulator's `libQnnHtp.so` takes to load. What the server does
before forking is checked, not assumed: it refuses to serve when loading left more than one
thread (docs/runner-protocol.md, "Fork server").

Wire format, one JSON object per line: the server first prints `{"ready": pid, "threads": n,
...}` (or `{"error": ...}`); a request `{"scenario", "stdout", "stderr", "env"}` gets
`{"child": pid}` once forked and `{"done": pid, "exit": n}` or `{"done": pid, "signal": n}`
when it ends. The child is its own process group, so a timeout kills it and whatever it started.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any, TypeGuard
from pathlib import Path
from collections.abc import Iterator

from harness.errors import HarnessError
from harness.output_limit import limit_bytes, notes_over, read_capped
from harness.process import ProcessOutput, piped

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # loading the simulator libraries on a busy machine
REPLY_TIMEOUT_S = 30.0  # for a fork to be reported
POOL_WAIT_S = 3600.0  # for a busy pool's server to come back (a run is bounded by its timeout)


class ForkServerError(HarnessError):
    """The fork server could not start or stopped answering (not a scenario's verdict)."""


class ForkServer:
    """One `harness-runner --serve` process; runs one scenario at a time."""

    def __init__(self, binary: Path | tuple[str, ...], preload: list[str], env: dict[str, str],
                 log: logging.LoggerAdapter | logging.Logger = log) -> None:
        # The server's stderr for its lifetime, closed (and removed) by close().
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="harness-fork-server-", suffix=".log")
        # Files of the run in progress: the fork's stdout and stderr (read back and removed
        # after each run) and whatever the caller puts in `scratch` (the scenario file, the QNN
        # trace), in memory (/dev/shm) where there is one: a disk costs milliseconds a file.
        shm = Path("/dev/shm")
        self.scratch = Path(tempfile.mkdtemp(prefix="harness-fork-",
                                             dir=shm if shm.is_dir() else None))
        # The native runner's binary, or a command (the Python runner's server)
        argv = [*(binary if isinstance(binary, tuple) else (str(binary),)), "--serve"]
        for lib in preload:
            argv += ["--preload", lib]
        self.what = f"the fork server {server_name(binary)}"
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._log,
                                         start_new_session=True)
        except OSError as exc:  # not executable, not a binary of this machine, gone
            self._log.close()
            shutil.rmtree(self.scratch, ignore_errors=True)
            raise ForkServerError(f"cannot start {self.what}: {exc}") from exc
        self._buffer = b""
        try:
            ready = self._reply(START_TIMEOUT_S)
        except ForkServerError as exc:  # it died before its first line (a damaged binary)
            message = (f"{self.what} did not start: it exited ({self.exit_status()}) before "
                       f"its first line; its log: {self.log_tail()}")
            self.close()
            raise ForkServerError(message) from exc
        if not is_ready(ready):
            tail = self.log_tail()
            self.close()
            raise not_started(self.what, ready, tail)
        self.threads = ready.get("threads")
        log.info("fork server %s ready (%s thread, preloaded %s)", self.proc.pid,
                 self.threads, ", ".join(preload) or "nothing")

    def run(self, scenario: Path, env: dict[str, str], timeout: float) -> ProcessOutput:
        """Run `scenario` in a fork with exactly `env` as its environment; its stdout and
        stderr come back in the result, as from a process (through two files in memory)."""
        stdout, stderr = self.scratch / "stdout", self.scratch / "stderr"
        request = {"scenario": str(scenario), "stdout": str(stdout), "stderr": str(stderr),
                   "env": env}
        try:
            piped(self.proc.stdin).write((json.dumps(request) + "\n").encode())
            piped(self.proc.stdin).flush()
        except (BrokenPipeError, OSError) as exc:
            raise ForkServerError(
                f"the fork server is gone ({exc}); its log: {self.log_tail()}") from exc
        started = self._reply(REPLY_TIMEOUT_S)
        if started is None or "child" not in started:
            raise ForkServerError(f"the fork server did not fork the scenario ({started}); "
                                  f"its log: {self.log_tail()}")
        pid = started["child"]
        done = self._reply(timeout)
        timed_out = done is None
        if done is None:  # timed out
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            done = self._reply(REPLY_TIMEOUT_S)
            if done is None:
                raise ForkServerError(f"the fork server did not reap its killed child {pid}")
        if "exit" in done:
            returncode: int | None = done["exit"]
        else:
            returncode = -done.get("signal", 0)
        if timed_out:
            returncode = None
        limit = limit_bytes()
        (out, out_size), (err, err_size) = _take_text(stdout, limit), _take_text(stderr, limit)
        notes = notes_over({"stdout": out_size, "stderr": err_size}, limit)
        return ProcessOutput(returncode, out, err, timed_out, notes)

    def _reply(self, timeout: float) -> dict | None:
        """The next reply line, or None when none came within `timeout` (or the server ended)."""
        deadline = time.monotonic() + timeout
        fd = piped(self.proc.stdout).fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                if self._buffer:
                    break
                raise ForkServerError(f"{self.what} exited ({self.exit_status()}); "
                                      f"its log: {self.log_tail()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return parse_reply(line, "the fork server")

    def exit_status(self) -> str:
        """How the server's process ended ("signal 11", "exit 1"), once it did."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "still running"
        return f"signal {-code}" if code < 0 else f"exit {code}"

    def log_tail(self, limit: int = 2000) -> str:
        try:
            text = Path(self._log.name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-limit:].strip() or "(empty)"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                piped(self.proc.stdin).close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                piped(stream).close()
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class ForkServerPool:
    """Up to `size` fork servers started on demand, each lent to one caller at a time, so up
    to `size` scenarios run at once (the ordering explorer's threads)."""

    def __init__(self, binary: Path | tuple[str, ...], preload: list[str], env: dict[str, str],
                 size: int,
                 log: logging.LoggerAdapter | logging.Logger = log) -> None:
        self.binary, self.preload, self.env, self.size = binary, preload, env, max(1, size)
        self.log = log
        self._idle: queue.Queue[ForkServer] = queue.Queue()
        self._started = 0
        self._lock = threading.Lock()
        self._all: list[ForkServer] = []

    @contextlib.contextmanager
    def lease(self) -> Iterator[ForkServer]:
        """A server of the pool for one run (its `scratch` is the caller's until it is back);
        one that failed is stopped and replaced by a new one on a later lease."""
        server = self._take()
        try:
            yield server
        except ForkServerError as exc:
            self.log.warning("fork server %s dropped: %s", server.proc.pid, exc)
            self._discard(server)
            raise
        except BaseException:
            self._idle.put(server)
            raise
        self._idle.put(server)

    def _take(self, wait_s: float | None = None) -> ForkServer:
        """An idle server, else a new one while the pool has room, else the next one given
        back, waiting at most `wait_s` (POOL_WAIT_S). Every start that fails gives its slot
        back, so failed starts never fill the pool (they did, and the next caller waited in
        queue.get() for ever)."""
        deadline = time.monotonic() + (POOL_WAIT_S if wait_s is None else wait_s)
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            with self._lock:
                start = self._started < self.size
                if start:
                    self._started += 1
            if start:
                return self._start()
            left = deadline - time.monotonic()
            if left <= 0:
                raise ForkServerError(
                    f"no server of the pool of {server_name(self.binary)} came free within "
                    f"{POOL_WAIT_S if wait_s is None else wait_s:g} s (all {self.size} busy)")
            try:  # a slot given back by a failed start or a dropped server is seen within 1 s
                return self._idle.get(timeout=min(1.0, left))
            except queue.Empty:
                continue

    def _start(self) -> ForkServer:
        try:
            server = ForkServer(self.binary, self.preload, self.env, self.log)
        except BaseException:
            with self._lock:
                self._started -= 1
            raise
        with self._lock:
            self._all.append(server)
        return server

    def _discard(self, server: ForkServer) -> None:
        server.close()
        with self._lock:
            self._started -= 1
            self._all.remove(server)

    def close(self) -> None:
        with self._lock:
            servers, self._all = self._all, []
            self._started = 0
        for server in servers:
            server.close()


def server_name(binary: Path | tuple[str, ...]) -> str:
    """The binary (or command) of a fork server, for its errors."""
    return " ".join(binary) if isinstance(binary, tuple) else str(binary)


def parse_reply(line: bytes, what: str) -> dict:
    """One reply line of a fork server (`what` names it in the error when it is not one)."""
    try:
        return json.loads(line)
    except ValueError:
        raise ForkServerError(f"{what} wrote {line[:200]!r}, not a reply") from None


def is_ready(reply: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether a server's first line says it serves (`{"ready": pid, ...}` with no error)."""
    return reply is not None and "error" not in reply and "ready" in reply


def not_started(what: str, reply: dict | None, log_tail: str) -> ForkServerError:
    """The error for a server whose first line was `reply` (None: it said nothing)."""
    why = reply.get("error") if reply else "no answer"
    return ForkServerError(f"{what} did not start: {why}; its log: {log_tail}")


def _take_text(path: Path, limit: int) -> tuple[str, int]:
    """The file's text within the output limit and its size, and the file gone (the caller
    keeps what it wants of it)."""
    text, size = read_capped(path, limit)
    path.unlink(missing_ok=True)
    return text, size
