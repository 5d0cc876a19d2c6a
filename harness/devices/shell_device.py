"""What the devices reached through a shell share (an adb device, a Linux board over ssh): a
workspace, commands run at a run's depth, hash-skipping pushes, push counts, forks of the
device's served runner (`ServedRunner`, the host's end of it), a run cut short
(`RunInterrupted`), a dropped device re-acquired or lost, and the end of a session.

A kind's device says how to run a shell command (`sh`), how to send files (`_send`), which
errors its transport raises (`transport_errors`), whether the device is there and how to reach
it again (`_there`, `_reconnect`) and how its messages name a drop; the rest is here, so both
kinds push, count, fail and end the same way.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import shlex
import time
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from typing import Any

from harness import output_limit, storage
from harness.cache import file_sha256
from harness.config import SocConfig
from harness.devices import leftovers
from harness.devices import workspace as ws_rules
from harness.devices.base import Device
from harness.devices.lease import DeviceLease, LeaseBusy
from harness.devices.payload import PushStats
from harness.devices.remote_run import (kill_in_directory, kill_tree, output_sizes,
                                        print_outputs, running_step, scenario_line,
                                        split_outputs)
from harness.errors import DeviceError
from harness.protocol.wire import run_ended
from harness.qnn.sdk import TRACE_ENV
from harness.protocol.output import RunOutput
from harness.runner.fork_server import ForkServerError, is_ready, not_started, parse_reply
from harness.runner.launch import missing_tool, shell_words
from harness.scenario import Scenario

q = shlex.quote

RUNNER_NAME = "executorch_hil_runner"  # the runner's name in a workspace
PID_FILE = "runner.pid"  # in each run's directory while its runner may be running
# The other files of a run's directory, whichever way the runner is started.
SCENARIO_FILE, STDOUT_FILE, STDERR_FILE, TRACE_FILE = (
    "scenario.json", "stdout.txt", "stderr.txt", "qnn_trace.txt")

# How long a fork server may take to answer a request it can answer at once (fork, kill).
FORK_REPLY_S = 30.0
START_TIMEOUT_S = 120.0  # for a fork server to load its libraries on a busy device
LOG_LIMIT = 16 * 1024  # of what a fork server and its libraries wrote on stderr


class RunInterrupted(DeviceError):
    """A run whose stream ended before the runner's exit was reported (the device dropped off,
    or the connection did). It keeps what the run streamed until then and names the step that
    was running, so the test's failure says where it stopped."""

    def __init__(self, message: str, output: RunOutput, step: str) -> None:
        super().__init__(message)
        self.output = output
        self.step = step


class ServedRunner(abc.ABC):
    """The host's end of a device's `harness-runner --serve` held open for the session
    (adb.fork, ssh.fork): requests out, reply lines and the tail of the server's log in, one
    scenario at a time. A kind says how its stream is written, read and closed."""

    where = "the device's fork server"  # how messages name it

    def __init__(self) -> None:
        self._lines = bytearray()
        self._stderr = bytearray()

    def _await_ready(self) -> None:
        """The server's first line: ready (its pid, threads and preloaded libraries), or
        ForkServerError saying why it did not start."""
        ready = self.reply(START_TIMEOUT_S)
        if not is_ready(ready):
            self.close()
            raise not_started(self.where, ready, self.log_tail())
        self.pid = ready["ready"]
        self.threads = ready.get("threads")
        self.preloaded = ready.get("preloaded", [])

    @abc.abstractmethod
    def send(self, request: dict[str, Any]) -> None:
        """One request line."""

    def reply(self, timeout: float) -> dict[str, Any] | None:
        """The next reply line, or None when none came within `timeout`. ForkServerError when
        the stream ended (the server exited, the device or the connection dropped it)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._lines:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self.ended:
                raise ForkServerError(f"{self.where} ended ({self._exit_text()}); its log: "
                                      f"{self.log_tail()}")
            self._pump(min(left, 5.0))
        line, _, rest = bytes(self._lines).partition(b"\n")
        self._lines = bytearray(rest)
        return parse_reply(line, self.where)

    @property
    @abc.abstractmethod
    def ended(self) -> bool:
        """Whether the stream has ended (no reply can come)."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool:
        """Whether the server is still there, from what its stream brought without waiting."""

    @abc.abstractmethod
    def _exit_text(self) -> str:
        """How the ended server's exit is named ("exit 1")."""

    @abc.abstractmethod
    def _pump(self, timeout: float) -> None:
        """Take what the stream brings within `timeout`: reply lines into `_lines` and log into
        `_log`; a stream that ends sets `ended`."""

    def _log(self, text: bytes) -> None:
        self._stderr = (self._stderr + text)[-LOG_LIMIT:]

    def log_tail(self, limit: int = 2000) -> str:
        return self._stderr.decode("utf-8", "replace")[-limit:].strip() or "(empty)"

    @abc.abstractmethod
    def close(self) -> None:
        """End the server's stdin: it reads the end and exits."""


class ShellDevice(Device):
    """A device with a workspace that a shell reaches. Subclasses call `__init__` (the state
    every shell device starts with), then set `device_lease` and `info`."""

    serial: str
    workspace: PurePosixPath
    keep_workspace: bool
    device_lease: DeviceLease
    stats: PushStats
    runs: dict[str, int]
    fork_refused: str
    _remote_sha: dict[str, str]  # remote path -> sha256 known to be there
    _scratch_made: bool
    _reacquiring: bool
    _servers: dict[bool, ServedRunner]  # the fork servers, by whether they preloaded QNN
    reacquire_s: float
    runner_path: PurePosixPath
    artifacts_dir: Path
    lease_wait: float
    isolation: str
    run_env: dict[str, str]
    notice: Callable[[str], None]  # a line for the session's header and summary
    # The errors the transport raises for a cut connection (they become `_offline`'s errors).
    transport_errors: tuple[type[BaseException], ...] = (OSError,)
    # How summary lines name this kind of device ("device", "board").
    noun = "device"
    # How a drop is told: `dropped` ("...; <came_back>, but another session holds it now",
    # "... and <not_back> within the re-acquire window"), and the log line while waiting
    # (what, why, seconds).
    dropped = "{serial} went offline during {what}{why}"
    came_back = "it came back"
    not_back = "did not come back"
    waiting_log = "offline during %s%s; waiting up to %.0f s for it to come back"
    # What a kept workspace's notice adds after the entries it holds.
    kept_tail = ""
    remove_timeout_s = 30.0  # for the workspace's removal at the end
    # Where workspaces may be (the workspace rules' scratch area): parents of a nested workspace
    # that the harness creates below it are removed with it, never the area itself.
    scratch: PurePosixPath = ws_rules.ANDROID_SCRATCH

    def __init__(self, serial: str, soc_config: SocConfig, workspace: PurePosixPath, *,
                 artifacts_dir: Path, keep_workspace: bool, reacquire_s: float,
                 notice: Callable[[str], None] | None, lease_wait: float,
                 isolation: str) -> None:
        """No I/O: the session's choices, and nothing pushed, run or served yet."""
        self.serial = serial
        self.soc_config = soc_config
        self.workspace = workspace
        self.artifacts_dir = artifacts_dir
        self.keep_workspace = keep_workspace
        self.reacquire_s = reacquire_s
        self.notice = notice or (lambda line: None)
        self.lease_wait = lease_wait
        # --scenario-isolation: "fork" runs each scenario as a fork of `harness-runner --serve`
        # on the device (the kind's `fork` module), "process" starts a runner per scenario.
        self.isolation = isolation
        self.lost = None
        self.stats = PushStats()
        self._remote_sha = {}
        self._reacquiring = False
        self._scratch_made = False
        self.runner_path = workspace / RUNNER_NAME  # what runs start (tests swap in scripts)
        self.run_env = {}  # extra variables every run gets (the interposer's)
        self.backends = None  # what the device's runtime registers, once known
        self.fork_refused = ""  # why the device's fork server could not serve, once it could not
        self.runs = {"fork": 0, "process": 0}
        self._servers = {}

    @staticmethod
    def _config_details(details: dict[str, str], soc_source: str, reported_soc: str,
                        soc: str) -> dict[str, str]:
        """`details` with where the SoC config came from and the SoC the device reported when
        the config is another's."""
        if soc_source:
            details["soc_from"] = soc_source.replace(" ", "_")
        if reported_soc and reported_soc != soc:
            details["reported_soc"] = reported_soc
        return details

    def sh(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        """A shell command (already quoted): (exit code, stdout then stderr). A transport that
        fails goes to `_offline` (the device re-acquired, or lost)."""
        self._check_not_lost()
        try:
            return self._shell(command, timeout)
        except self.transport_errors as exc:
            raise self._offline(f"`{command[:80]}`", exc) from exc  # type: ignore[arg-type]

    def launch_prefix(self, scenario: Scenario) -> str:
        """The scenario's launch wrappers as the device's shell command prefix ("" for none),
        each tool found on the device's PATH; DeviceError naming its package otherwise (an
        Android device has neither fiu-run nor setpriv; a Debian board may)."""
        for launch in scenario.launch:
            code, out = self.sh(f"command -v {q(launch.tool)}")
            if code != 0 or not out.strip():
                raise DeviceError(f"scenario {scenario.name} on {self.serial}: "
                                  + missing_tool(launch).replace("not installed here",
                                                                 "not installed on the device"))
        return shell_words(scenario.launch) + " " if scenario.launch else ""

    @abc.abstractmethod
    def _shell(self, command: str, timeout: float) -> tuple[int, str]:
        """One shell command over the transport, its errors raised as they come (the lease's
        heartbeat uses it too: no re-acquire from there)."""

    @abc.abstractmethod
    def _send(self, files: list[tuple[Path, PurePosixPath, int]]) -> None:
        """Send (local file, remote path, mode) each, in one transfer."""

    @abc.abstractmethod
    def _there(self) -> bool:
        """Whether the device answers now (its transport is there)."""

    @abc.abstractmethod
    def _reconnect(self) -> None:
        """Reach the device again within `reacquire_s` (DeviceError when it does not come
        back), its fork servers closed (their streams went with the device)."""

    @abc.abstractmethod
    def _install(self) -> None:
        """Take the workspace and push the payload (at set-up, and after a re-acquire)."""

    @abc.abstractmethod
    def _pushed(self) -> list[PurePosixPath]:
        """Where the payload went on the device (the workspace's own entries)."""

    def _leftover_script(self) -> str:
        """Shell code that kills the process group of every runner whose pid file is still in
        the workspace, if that process still runs in that run directory (so a reused pid is
        never killed), and removes the pid files. Prints `HARNESS_KILLED <pid>` per kill."""
        runs = q(str(self.workspace / "runs"))
        return (f"for f in {runs}/*/{q(PID_FILE)}; do [ -f \"$f\" ] || continue; "
                "p=$(cat \"$f\"); d=${f%/*}; rm -f \"$f\"; "
                "case \"$p\" in ''|*[!0-9]*) continue;; esac; "
                "if [ \"$(readlink /proc/$p/cwd 2>/dev/null)\" = \"$d\" ]; then "
                f"{kill_tree('$p')}; echo HARNESS_KILLED $p; fi; "
                "done; true")

    def _refusal(self, text: str) -> str:
        """The workspace rules' refusal as this kind says it (its shell command in the advice)."""
        return text

    # Set-up ------------------------------------------------------------------------------
    def _reclaim(self) -> None:
        """Remove the workspaces that killed sessions left on the device, whose owner is
        provably gone (`harness.devices.leftovers`), with a notice naming each: called once the
        lease is held, so no other session uses the device. Best effort: a device that does not
        answer fails the set-up's next call, not this one."""
        try:
            found = leftovers.find(self.sh, self.scratch,
                                   leftovers.LeaseState.held_by_caller(self.device_lease.token),
                                   skip=[self.workspace])
            gone = [left for left in found if left.state == "gone"]
            done = leftovers.remove(self.sh, gone, self.scratch)
        except DeviceError as exc:
            self.log.warning("could not look for workspaces earlier sessions left: %s", exc)
            return
        for left in gone:
            self.notice(f"{self.serial}: reclaimed workspace {left.path} ({left.size()}) of "
                        f"{left.owner()}: {left.reason}; {done[left.path]}")

    def _take_workspace(self, first: str = "") -> None:
        """One shell call (after `first`): take the workspace by its rules
        (harness.devices.workspace), make `files/` and `runs/`, and kill the runners an earlier
        session or an interrupted run left running there."""
        self._scratch_made = False
        ws = self.workspace
        dirs = " ".join(q(str(ws / d)) for d in ("files", "runs"))
        entries = ws_rules.top_entries(ws, [self.runner_path, *self._pushed()]) | {RUNNER_NAME}
        take = ws_rules.take_script(ws, self.scratch, owner=self.device_lease.owner(),
                                    keep=self.keep_workspace, entries=entries)
        code, out = self.sh(f"{first}{{ {take}; }} && mkdir -p {dirs} && "
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
    def _prepare_run(self, scenario: Scenario,
                     artifacts: Path) -> tuple[PushStats, bytes, str, PurePosixPath]:
        """Push the scenario's files the device lacks (no call once the session pushed them),
        write its scenario file among the artifacts, and name its run directory by that file's
        content, like the files it uses: the same scenario in a later session on a kept
        workspace finds its directory and scenario file already there. Returns (the push
        counts before, the scenario file's bytes, their sha256, the run directory)."""
        self._check_not_lost()
        files = {p: self.workspace / "files" / f"{file_sha256(p)[:16]}-{p.name}"
                 for p in scenario.files()}
        before = dataclasses.replace(self.stats)
        self.push_files(files)
        artifacts.mkdir(parents=True, exist_ok=True)
        local = scenario.write(artifacts / "scenario.json",
                               lambda p: str(PurePosixPath("../..") / "files" / files[p].name))
        content = local.read_bytes()
        sha = hashlib.sha256(content).hexdigest()
        return before, content, sha, self.workspace / "runs" / f"{sha[:16]}-{scenario.name}"

    @staticmethod
    def _output_buffers() -> tuple[int, output_limit.CappedBuffer, output_limit.CappedBuffer]:
        """(the output limit, a process run's stdout buffer, its shell's stderr buffer): the
        stdout keeps at most the limit of the runner's stdout (its head and tail) and room
        after it for the stderr and trace the run's command prints, within theirs."""
        limit = output_limit.limit_bytes()
        return (limit,
                output_limit.CappedBuffer(limit, tail=limit - limit // 2 + 2 * limit + 65536),
                output_limit.CappedBuffer(65536))

    def _process_output(self, text: str, total: int, nonce: str,
                        ) -> tuple[str, tuple[str, str] | None, list[str], str, int | None]:
        """What a process run's command printed (`total` bytes of it reached the host): the
        scenario file's line counted as a push or a skip; the runner's stdout (trimmed to the
        output limit), its stderr and QNN trace printed after the exit line (None when the
        run did not get so far), notes of outputs over the limit, how the scenario file was
        sent ("written", "kept" or ""), and the exit code (a signal's negated; None without
        an exit line)."""
        limit = output_limit.limit_bytes()
        text, sent = scenario_line(text)
        if sent == "written":
            self.stats.pushed += 1
        elif sent == "kept":
            self.stats.skipped += 1
        stdout, outputs = split_outputs(text, nonce)
        sizes = output_sizes(text, nonce)
        after = text.find(f"\nHARNESS_STDERR_{nonce}\n")
        printed = total - (len(text[after:].encode()) if after >= 0 else 0)
        notes = output_limit.notes_over(
            {"stdout": printed, "stderr": sizes[0], "the QNN trace": sizes[1]}, limit)
        stdout = output_limit.trim(stdout, printed, limit)
        exit_line = [l for l in stdout.splitlines() if l.startswith("HARNESS_EXIT ")]
        code = int(exit_line[-1].split()[1]) if exit_line else None
        if code is not None and code > 128:
            code = -(code - 128)
        return stdout, outputs, notes, sent, code

    def _process_result(self, returncode: int | None, stdout: str,
                        outputs: tuple[str, str] | None, run_dir: PurePosixPath,
                        timed_out: bool, notes: list[str], logs: dict[str, str],
                        before: PushStats) -> RunOutput:
        """A process run's output: its stderr and trace (read from the device when the run's
        command did not print them: a timeout cut it short) and the push counts."""
        stderr, trace = outputs if outputs is not None else self._fetch_outputs(run_dir)
        self.runs["process"] += 1
        return RunOutput(returncode, stdout, stderr, trace, timed_out, "native", logs,
                         self._pushes(before), notes + self._failed_run_notes(returncode, stdout))

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

    def _fork_exchange(self, server: ServedRunner, run_dir: PurePosixPath, content: bytes,
                       timeout: float, child: list[str], reply_s: float = FORK_REPLY_S,
                       ) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """Send the request of a run of scenario file `content` in `run_dir`
        (`_fork_request`); (the fork's start reply, its end reply, whether it timed out). A
        timeout kills the fork's process group and waits for its end. The child's pid goes
        into `child` as soon as it is known (the caller's error path needs it).
        ForkServerError when the server does not fork or does not report the end."""
        server.send(self._fork_request(run_dir, content))
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

    def _fork_output(self, done: dict[str, Any], timed_out: bool, logs: dict[str, str],
                     before: PushStats) -> RunOutput:
        """The run's output from the fork's end reply (read back within the output limit)."""
        limit = output_limit.limit_bytes()
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

    def _refuse_forks(self, exc: Exception) -> None:
        """The fork server could not start on a device that is there: every later scenario
        starts a runner process, and the session says why once."""
        self.fork_refused = str(exc)
        self.notice(f"{self.serial}: each scenario starts a new runner process, since the "
                    f"runner's fork server could not serve there: {exc}")

    def _drop_server(self, server: ServedRunner) -> None:
        server.close()
        self._servers = {k: v for k, v in self._servers.items() if v is not server}

    def _close_servers(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers = {}

    def _kill_run(self, pid: str, run_dir: PurePosixPath) -> None:
        """Kill a run that timed out or whose end never reached the host: its process group
        when its pid did, and every process still in its run directory: a child that left the
        group with `setsid`, or any process of a run whose stream was cut before the pid
        reached the host or the shell wrote the pid file. The directory is this run's alone:
        named by the scenario, in this session's workspace, on a device the lease keeps other
        sessions off. One `ls` of the processes' cwd links, not a command per process."""
        known = f"{kill_tree(pid)}; " if pid.isdigit() else ""
        self.sh(f"{known}{kill_in_directory(run_dir)}; rm -f {q(str(run_dir / PID_FILE))}; true")

    def _failed_run_notes(self, returncode: int | None, stdout: str) -> list[str]:
        """For a run that did not finish (no end event, killed, a signal): whether the
        workspace's storage is full. A run that finished wrote all it had to."""
        ended = run_ended(stdout)
        if ended and returncode is not None and returncode >= 0:
            return []
        note = self._storage_note()
        return [note] if note else []

    def _storage_note(self) -> str:
        """The workspace's filesystem is full (ENOSPC): its words, or "" (one `df` call)."""
        try:
            code, out = self.sh(f"df -k {q(str(self.workspace / 'runs'))} 2>/dev/null",
                                timeout=15)
        except DeviceError:
            return ""
        reading = storage.parse_df(out) if code == 0 else None
        if reading is None:
            return ""
        return storage.full_note(f"{self.serial}:{self.workspace / 'runs'}", *reading)

    def _interruption(self, scenario: Scenario, stdout: str,
                      artifacts: Path) -> tuple[RunOutput, str, str]:
        """What an interrupted run leaves: its output so far (kept in `runner.stdout` of its
        artifacts), the step that was running, and the sentence saying both."""
        (artifacts / "runner.stdout").write_text(stdout)
        step = running_step(scenario, stdout)
        kept = (f"the run of scenario {scenario.name} was interrupted during {step}; the "
                f"{len(stdout.splitlines())} lines it streamed are kept in "
                f"{artifacts / 'runner.stdout'}")
        return RunOutput(None, stdout, "", runner="native"), step, kept

    # A dropped device ----------------------------------------------------------------------
    def _words(self, exc: Exception) -> str:
        """What the transport said of a failure, for the messages of a drop."""
        return str(exc)

    def _failed(self, what: str, exc: Exception | None, why: str) -> DeviceError:
        """The error of a call that failed on a device that is still there."""
        return DeviceError(f"{self.serial}: {what} failed{why}")

    def _back(self, what: str) -> None:
        """Tell that the device is back and the session goes on."""
        self.log.info("back online; workspace re-installed, the session goes on")

    def _offline(self, what: str, exc: Exception | None) -> DeviceError:
        """The transport failed during `what`: a device still there fails this call; one that
        dropped is re-acquired for the full window (`_reconnect`, the lease kept, the
        workspace re-installed) and this call fails either way; one that does not come back
        (or whose lease another session took) is lost, and every later call fails at once."""
        why = f" ({self._words(exc)})" if exc else ""
        if self._reacquiring or self._there():
            return self._failed(what, exc, why)
        dropped = self.dropped.format(serial=self.serial, what=what, why=why)
        self._reacquiring = True
        self.log.warning(self.waiting_log, what, why, self.reacquire_s)
        try:
            self._reconnect()
            self._remote_sha.clear()  # a restarted device may have lost files
            self.device_lease.acquire(0)  # still ours (or taken over meanwhile: then lost)
            self._install()
        except LeaseBusy as taken:
            self.lost = (f"{dropped}; {self.came_back}, but another session holds it now: "
                         f"{taken}")
            return DeviceError(self.lost)
        except DeviceError as gone:
            self.lost = (f"{dropped} and {self.not_back} within the {self.reacquire_s:.0f} s "
                         f"re-acquire window: {gone}")
            return DeviceError(self.lost)
        finally:
            self._reacquiring = False
        self._back(what)
        return DeviceError(f"{dropped}; it is back, the session goes on")

    # End -----------------------------------------------------------------------------------
    def _remove_workspace(self) -> None:
        """Remove what this harness wrote in the workspace (`harness.devices.workspace`: only
        with its marker there, the directory itself only if it created it and it is empty)."""
        entries = ws_rules.top_entries(self.workspace, [self.runner_path, *self._pushed()])
        out = self.sh(ws_rules.remove_script(self.workspace, entries | {RUNNER_NAME},
                                             self.scratch),
                      timeout=self.remove_timeout_s)[1]
        for line in out.splitlines():
            if line.startswith("HARNESS_WS kept"):
                left = line[len("HARNESS_WS kept"):].strip() or "entries"
                self.notice(f"{self.serial}: workspace {self.workspace} kept: it holds files the "
                            f"harness did not write ({left}){self.kept_tail}")
            elif line.startswith("HARNESS_WS nomarker"):
                self.notice(f"{self.serial}: workspace {self.workspace} kept: its "
                            f"{ws_rules.MARKER} marker is gone, so nothing in it is removed")

    def _disconnect(self) -> None:
        """Close the transport at the end of the session (nothing to close by default)."""

    def close(self) -> None:
        """Stop the fork servers, kill runners left running (the session was interrupted,
        SIGTERM), remove the workspace (unless kept, or the device is lost), release the lease
        and close the transport."""
        self._close_servers()
        try:
            if not self.lost:
                self.sh(f"{kill_in_directory(self.workspace / 'runs', below=True)}; true",
                        timeout=30)
                if not self.keep_workspace:
                    self._remove_workspace()
        except DeviceError:
            pass
        finally:
            self.device_lease.release()
            self._disconnect()

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
