"""What the devices reached through a shell share (an adb device, a Linux board over ssh): a
workspace, commands run at a run's depth, hash-skipping pushes, push counts, a lost device.

A kind's device says how to run a shell command (`sh`), how to send files (`_send`) and which
errors its transport raises (`transport_errors`); the rest is here, so both kinds push, count
and fail the same way.
"""

from __future__ import annotations

import abc
import dataclasses
import shlex
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from typing import Any, Protocol

from harness import output_limit
from harness.cache import file_sha256
from harness.devices import workspace as ws_rules
from harness.devices.base import Device
from harness.devices.lease import DeviceLease
from harness.devices.payload import PushStats
from harness.devices.remote_run import print_outputs, split_outputs
from harness.errors import DeviceError
from harness.qnn.sdk import TRACE_ENV
from harness.results.run import RunOutput
from harness.runner.fork_server import ForkServerError

q = shlex.quote

PID_FILE = "runner.pid"  # in each run's directory while its runner may be running
# The other files of a run's directory, whichever way the runner is started.
SCENARIO_FILE, STDOUT_FILE, STDERR_FILE, TRACE_FILE = (
    "scenario.json", "stdout.txt", "stderr.txt", "qnn_trace.txt")


class ForkStream(Protocol):
    """A device's `harness-runner --serve` held open for the session (adb.fork, ssh.fork)."""

    def send(self, request: dict[str, Any]) -> None: ...
    def reply(self, timeout: float) -> dict[str, Any] | None: ...
    def log_tail(self) -> str: ...


# How long a fork server may take to answer a request it can answer at once (fork, kill).
FORK_REPLY_S = 30.0


class ShellDevice(Device):
    """A device with a workspace that a shell reaches. Subclasses set, in `__init__`,
    `serial`, `workspace`, `keep_workspace`, `device_lease`, `stats`, `_remote_sha`,
    `_scratch_made`, `runs` and `fork_refused`."""

    serial: str
    workspace: PurePosixPath
    keep_workspace: bool
    device_lease: DeviceLease
    stats: PushStats
    runs: dict[str, int]
    fork_refused: str
    _remote_sha: dict[str, str]  # remote path -> sha256 known to be there
    _scratch_made: bool
    notice: Callable[[str], None]  # a line for the session's header and summary
    # The errors the transport raises for a cut connection (they become `_offline`'s errors).
    transport_errors: tuple[type[BaseException], ...] = (OSError,)
    # How summary lines name this kind of device ("device", "board").
    noun = "device"

    @abc.abstractmethod
    def sh(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        """A shell command (already quoted); (exit code, output)."""

    @abc.abstractmethod
    def _send(self, files: list[tuple[Path, PurePosixPath, int]]) -> None:
        """Send (local file, remote path, mode) each, in one transfer."""

    @abc.abstractmethod
    def _offline(self, what: str, exc: Exception | None) -> DeviceError:
        """The error for a transport cut during `what` (after re-acquiring, if it can)."""

    @abc.abstractmethod
    def _leftover_script(self) -> str:
        """Shell code killing runners an earlier session left running in the workspace, each
        printed as `HARNESS_KILLED <pid>`."""

    def _refusal(self, text: str) -> str:
        """The workspace rules' refusal as this kind says it (its shell command in the advice)."""
        return text

    # Set-up ------------------------------------------------------------------------------
    def _take_workspace(self, first: str = "") -> None:
        """One shell call (after `first`): take the workspace by its rules
        (harness.devices.workspace), make `files/` and `runs/`, and kill the runners an earlier
        session or an interrupted run left running there."""
        self._scratch_made = False
        ws = self.workspace
        dirs = " ".join(q(str(ws / d)) for d in ("files", "runs"))
        code, out = self.sh(f"{first}{{ {ws_rules.take_script(ws)}; }} && mkdir -p {dirs} && "
                            f"{{ {self._leftover_script()}; }}")
        refused = ws_rules.refusal(ws, out)
        if refused:
            raise DeviceError(f"{self.serial}: {self._refusal(refused)}")
        if code != 0:
            raise DeviceError(f"{self.serial}: cannot create workspace {ws}: {out.strip()}")
        killed = [line.split()[1] for line in out.splitlines()
                  if line.startswith("HARNESS_KILLED ") and len(line.split()) > 1]
        if killed:
            self.log.warning("killed leftover runner(s) in %s: pid %s", ws, ", ".join(killed))
            self.notice(f"{self.serial}: killed {len(killed)} runner(s) left running in workspace "
                        f"{ws} by an earlier session or an interrupted run "
                        f"(pid {', '.join(killed)})")

    def _push_payload(self, entries: list[tuple[Path, PurePosixPath, int]]) -> None:
        """The runner and its libraries, each unless the device has its bytes."""
        before = dataclasses.replace(self.stats)
        self._push(entries)
        self.log.info("workspace %s ready: %d file(s) pushed, %d already there", self.workspace,
                      self.stats.pushed - before.pushed, self.stats.skipped - before.skipped)

    def command(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        """Run in a directory at the same depth as a run's, so `scratch_dir()` resolves alike."""
        cwd = self.workspace / "runs" / ".command"
        return self.sh(f"mkdir -p {q(str(cwd))} && cd {q(str(cwd))} && "
                       + " ".join(q(a) for a in argv), timeout)

    def scratch_dir(self) -> str:
        if not self._scratch_made:
            self.sh(f"mkdir -p {q(str(self.workspace / 'scratch'))}")
            self._scratch_made = True
        return "../../scratch"

    # Pushes ------------------------------------------------------------------------------
    def push_files(self, files: dict[Path, PurePosixPath], mode: int = 0o644) -> PushStats:
        """Push each file unless the device already holds the same bytes (by sha256)."""
        return self._push([(path, remote, mode) for path, remote in files.items()])

    def _push(self, entries: list[tuple[Path, PurePosixPath, int]]) -> PushStats:
        """(local file, remote path, mode) each, pushed unless the device holds its bytes: the
        sha256 of every file not known from this session in one shell call, then every missing
        file in one transfer."""
        stats = PushStats()
        local = {str(remote): file_sha256(path.resolve()) for path, remote, _ in entries}
        unknown = [r for r, sha in local.items() if self._remote_sha.get(r) != sha]
        if unknown:
            self._remote_sha.update(self.remote_sha256(unknown))
        missing = [(path.resolve(), remote, mode) for path, remote, mode in entries
                   if self._remote_sha.get(str(remote)) != local[str(remote)]]
        stats.skipped = len(entries) - len(missing)
        if missing:
            self._check_not_lost()
            try:
                self._send(missing)
            except self.transport_errors as exc:
                names = ", ".join(path.name for path, _, _ in missing[:4])
                more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
                raise self._offline(f"push of {names}{more}", exc) from exc  # type: ignore[arg-type]
            for _, remote, _ in missing:
                self._remote_sha[str(remote)] = local[str(remote)]
            stats.pushed = len(missing)
        self.stats.pushed += stats.pushed
        self.stats.skipped += stats.skipped
        return stats

    def remote_sha256(self, remotes: list[str], timeout: float = 300.0) -> dict[str, str]:
        """sha256 of each remote file the device has; matched by order, not by the printed
        name, which a device may print differently (a symlinked or remapped path)."""
        _, out = self.sh("; ".join(f"sha256sum {q(r)} 2>/dev/null; echo @" for r in remotes),
                         timeout=timeout)
        found = {}
        for remote, chunk in zip(remotes, out.split("@\n")):
            sha = chunk.strip().split(" ")[0] if chunk.strip() else ""
            if len(sha) == 64:
                found[remote] = sha
        return found

    def _pushes(self, before: PushStats) -> dict[str, int]:
        """A run's push counts, and the session's so far."""
        return {"pushed": self.stats.pushed - before.pushed,
                "skipped": self.stats.skipped - before.skipped,
                "session_pushed": self.stats.pushed, "session_skipped": self.stats.skipped}

    # Runs --------------------------------------------------------------------------------
    def _fetch_outputs(self, run_dir: PurePosixPath) -> tuple[str, str]:
        """The runner's stderr and the QNN trace of a run whose own output did not bring them
        (a timeout cut it short): one shell call."""
        nonce = uuid.uuid4().hex[:16]
        _, text = self.sh("true" + print_outputs(q(str(run_dir / STDERR_FILE)),
                                                 q(str(run_dir / TRACE_FILE)), nonce))
        _, outputs = split_outputs(text, nonce)
        return outputs if outputs is not None else ("", "")

    # Forks of the device's served runner ----------------------------------------------------
    def _fork_request(self, run_dir: PurePosixPath, content: bytes) -> dict[str, Any]:
        """One fork request (runner-protocol.md): the run directory (relative to the server's
        `runs/`), the scenario file unless there, the trace emptied, the pid file, and the
        runner's stdout, stderr and trace read back within the output limit."""
        return {"dir": run_dir.name, "scenario": SCENARIO_FILE, "stdout": STDOUT_FILE,
                "stderr": STDERR_FILE, "inherit_env": True, "env": {TRACE_ENV: TRACE_FILE},
                "write": {SCENARIO_FILE: content.decode("utf-8")},
                "truncate": [TRACE_FILE], "pid_file": PID_FILE,
                "read": [STDOUT_FILE, STDERR_FILE, TRACE_FILE],
                "read_limit": output_limit.limit_bytes()}

    def _fork_exchange(self, server: ForkStream, request: dict[str, Any], run_dir: PurePosixPath,
                       timeout: float, child: list[str], reply_s: float = FORK_REPLY_S,
                       ) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Send `request`; (the fork's start reply, its end reply, whether it timed out). A
        timeout kills the fork's process group and waits for its end. The child's pid goes
        into `child` as soon as it is known (the caller's error path needs it).
        ForkServerError when the server does not fork or does not report the end."""
        server.send(request)
        started = server.reply(reply_s)
        if started is None or "child" not in started:
            raise ForkServerError(f"the {self.noun}'s fork server did not fork the scenario "
                                  f"({started}); its log: {server.log_tail()}")
        pid = str(started["child"])
        child.append(pid)
        self.stats.pushed += len(started.get("written", []))
        self.stats.skipped += len(started.get("kept", []))
        done = server.reply(timeout)
        timed_out = done is None
        if done is None:
            self._kill_run(pid, run_dir)
            done = server.reply(reply_s)
            if done is None:
                raise ForkServerError(f"the {self.noun}'s fork server did not report the end of "
                                      f"its killed child {pid}")
        return started, done, timed_out

    def _fork_output(self, done: dict[str, Any], timed_out: bool, limit: int,
                     logs: dict[str, str], before: PushStats) -> RunOutput:
        """The run's output from the fork's end reply."""
        files = done.get("files", {})
        returncode = self._fork_returncode(done, timed_out)
        self.runs["fork"] += 1
        stdout = files.get(STDOUT_FILE, "")
        sizes = done.get("sizes", {})
        notes = output_limit.notes_over({"stdout": sizes.get(STDOUT_FILE, 0),
                                         "stderr": sizes.get(STDERR_FILE, 0),
                                         "the QNN trace": sizes.get(TRACE_FILE, 0)}, limit)
        return RunOutput(returncode, stdout, files.get(STDERR_FILE, ""),
                         files.get(TRACE_FILE, ""), timed_out, "native", logs,
                         self._pushes(before), notes + self._failed_run_notes(returncode, stdout))

    @staticmethod
    def _fork_returncode(done: dict[str, Any], timed_out: bool) -> int | None:
        """The fork's exit code, minus its signal when one killed it; None after a timeout."""
        if timed_out:
            return None
        return int(done["exit"]) if "exit" in done else -int(done.get("signal", 0))

    @abc.abstractmethod
    def _kill_run(self, pid: str, run_dir: PurePosixPath) -> None:
        """Kill a run's process group and whatever is left in its run directory."""

    @abc.abstractmethod
    def _failed_run_notes(self, returncode: int | None, stdout: str) -> list[str]:
        """What the device saw about a run that did not finish (a full disk)."""

    def _check_not_lost(self) -> None:
        """Raise what happened to a device that is gone for good (or whose lease was lost)."""
        if not self.lost and self.device_lease.lost:
            self.lost = self.device_lease.lost
        if self.lost:
            raise DeviceError(self.lost)

    def summary(self) -> list[str]:
        runs = (f"{self.serial}: scenarios: {self.runs['fork']} as forks of the {self.noun}'s "
                f"harness-runner --serve, {self.runs['process']} as new runner processes")
        if self.fork_refused:
            runs += f" (the fork server could not serve: {self.fork_refused})"
        return [f"{self.serial}: pushes this session: {self.stats.pushed} pushed, "
                f"{self.stats.skipped} skipped (sha256 already on the {self.noun}); workspace "
                f"{self.workspace}" + (" (kept)" if self.keep_workspace else ""), runs]
