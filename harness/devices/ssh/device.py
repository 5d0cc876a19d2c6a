"""A Qualcomm Linux board over ssh (`SshDevice`), with the adb kind's guarantees.

- Pushes skip by sha256: every file the session has not seen is checked in one command
  (`sha256sum` of all of them), the missing ones go in one tar stream (`SshTransport.push`).
- A lease per board (`harness.devices.lease`) in `LEASE_DIR`, below /tmp so that every user
  of the board sees it; `--lease-wait` waits for a busy board.
- The workspace follows `harness.devices.workspace`'s rules below `<board $HOME>/.executorch-hil`
  (`workspace_root`): a marker file, a non-empty unmarked directory refused, only the harness's
  own entries removed. Below the home rather than /tmp: it survives reboots (a kept workspace
  still skips its pushes) and no tmp cleaner ages files out of a long session.
- Scenarios are forks of one `harness-runner --serve` per library set, its protocol on one
  multiplexed ssh session held for the session (`fork.BoardForkServer`); `--scenario-isolation
  process` starts a runner per scenario (one ssh session each). Either way the runner leads its
  own process group, so a timeout kills the group and every process left in its run directory.
- A crash gets its signal and what the board has of it from the run's window: `journalctl`,
  `dmesg`, core files in the run directory; each is optional and the evidence says which
  were unavailable and why.
- A dropped connection is re-acquired (a new ControlMaster within `reacquire_s`, the lease
  checked, the workspace re-installed); otherwise every later call fails at once with why.
"""

from __future__ import annotations

import json
import select
import time
import uuid
from pathlib import Path, PurePosixPath
from collections.abc import Callable

from harness.process import piped
from harness.cache import file_sha256
from harness.programs.compile import uses_qnn
from harness.config import SocConfig
from harness.devices.base import DeviceInfo
from harness.devices.shell_device import (PID_FILE, RUNNER_NAME, STDERR_FILE, STDOUT_FILE,
                                          TRACE_FILE, RunInterrupted, ServedRunner, ShellDevice)
from harness.devices.lease import DeviceLease
from harness.devices.payload import Payload, PushStats
from harness.devices.remote_run import marker, print_outputs, safe_name, tail, to_int
from harness.devices.ssh.fork import BoardForkServer
from harness.devices.ssh.identify import BoardIdentity
from harness.devices.ssh.payload import QNN_DIR
from harness.devices.ssh.transport import SshError, SshTransport, q
from harness.errors import DeviceError
from harness.protocol.memory import ALLOCATOR_ENV
from harness.qnn.sdk import TRACE_ENV
from harness.protocol.output import RunOutput
from harness.runner.fork_server import ForkServerError
from harness.scenario import Scenario

ROOT_NAME = ".executorch-hil"  # below the board user's home: the only place workspaces go
LEASE_DIR = "/tmp/.executorch-hil-lease"
CONNECT_S = 10.0
REACQUIRE_S = 30.0
LOG_LINES = 300
EXPLORATION_LIMIT = 300  # orderings a big exploration samples on a board (each over ssh)


def workspace_root(identity: BoardIdentity) -> PurePosixPath:
    """Where workspaces may be on this board: `<$HOME>/.executorch-hil`."""
    if not identity.home.startswith("/"):
        raise DeviceError(f"{identity.name}: the board's user has no home directory ($HOME "
                          f"is {identity.home!r}); the workspace root is $HOME/{ROOT_NAME}")
    return PurePosixPath(identity.home) / ROOT_NAME


def new_workspace(root: PurePosixPath, worker: str) -> PurePosixPath:
    return root / f"ws-{uuid.uuid4().hex[:8]}-{worker}"


class SshDevice(ShellDevice):
    exploration_limit: int | None = EXPLORATION_LIMIT
    transport_errors = (SshError,)
    noun = "board"
    dropped = "{serial}: the connection dropped during {what}{why}"
    came_back = "the board came back"
    not_back = "the board did not answer again"
    waiting_log = "connection lost during %s%s; waiting up to %.0f s"
    remove_timeout_s = 60.0

    def _send(self, files: list[tuple[Path, PurePosixPath, int]]) -> None:
        """Every file in one tar stream below the workspace."""
        self.transport.push(self.workspace, files)

    def __init__(self, transport: SshTransport, identity: BoardIdentity, soc_config: SocConfig,
                 workspace: PurePosixPath, root: PurePosixPath, *, artifacts_dir: Path,
                 keep_workspace: bool = False, reacquire_s: float = REACQUIRE_S,
                 soc_source: str = "", notice: Callable[[str], None] | None = None,
                 session_id: str = "", worker: str = "master", lease_wait: float = 0.0,
                 isolation: str = "fork", machine: str | None = None,
                 machine_source: str = "uname -m", lease_dir: str = LEASE_DIR) -> None:
        """No I/O: `setup` takes the lease, creates the workspace and pushes."""
        super().__init__(transport.target.text, soc_config, workspace,
                         artifacts_dir=artifacts_dir, keep_workspace=keep_workspace,
                         reacquire_s=reacquire_s, notice=notice, lease_wait=lease_wait,
                         isolation=isolation)
        self.transport = transport
        self.identity = identity
        self.root = root
        self.scratch = root  # the workspace rules' scratch area on a board
        self.machine = machine or identity.machine
        self.device_lease = DeviceLease(f"ssh:{self.serial}", self.serial, self.transport.run,
                                        session=session_id, worker=worker, notice=self.notice,
                                        lease_dir=lease_dir)
        details = {"host": identity.hostname or "?", "user": identity.user or "?",
                   "kernel": identity.kernel.replace(" ", "_") or "?"}
        if identity.model:
            details["model"] = identity.model.replace(" ", "_")
        if identity.soc_id:
            details["soc_id"] = identity.soc_id
        self._config_details(details, soc_source, identity.soc, soc_config.soc)
        if self.machine != identity.machine:
            details["arch_from"] = f"{machine_source}(uname_-m:{identity.machine})"
        self.info = DeviceInfo(self.serial, "ssh", soc_config.soc, self.machine, "", details)
        self.payload: Payload | None = None
        self.evidence_unavailable: dict[str, str] = {}

    # The contract's small parts ------------------------------------------------------------
    def replay_args(self) -> list[str]:
        return ["--device", self.serial]

    def runner_description(self) -> str:
        how = ("a fork of harness-runner --serve on the board, over the session's ssh "
               "connection" if self.isolation == "fork" else "a new process")
        return f"{self.runner_kind}; each scenario {how}"

    # Shell ---------------------------------------------------------------------------------
    def _shell(self, command: str, timeout: float) -> tuple[int, str]:
        """A command on the board (already quoted), over the session's connection."""
        return self.transport.run(command, timeout)

    # Set-up --------------------------------------------------------------------------------
    def setup(self, payload: Payload) -> None:
        """Take the lease, reclaim the workspaces of sessions that are gone, then take the
        workspace, then push what the board lacks."""
        self.payload = payload
        self.run_env = dict(payload.env)
        self.dsp_heap = payload.dsp_heap
        self.dsp_heap_note = payload.dsp_heap_note
        self.backends = payload.backends
        self.info.details["backends"] = ",".join(payload.backends) or "none"
        self.device_lease.acquire(self.lease_wait)
        try:
            self._reclaim()
            self._install()
            if self.machine != self.identity.machine:
                self._check_runs_here()
        except BaseException:
            self.device_lease.release()
            raise

    def _install(self) -> None:
        self._take_workspace(first=f"mkdir -p {q(str(self.root))} && ")
        payload = self.payload
        entries = [(payload.runner, self.runner_path, 0o755)] if payload else []
        entries += [(p, r, 0o644) for p, r in (payload.files.items() if payload else ())]
        self._push_payload(entries)

    def _pushed(self) -> list[PurePosixPath]:
        return list(self.payload.files.values()) if self.payload else []

    def _refusal(self, text: str) -> str:
        return text.replace("`adb shell rm -r", f"`ssh {self.transport.target.ssh_host} rm -r")

    def _check_runs_here(self) -> None:
        """A board presented as another architecture (--ssh-arch) must run the runner: say so
        at start-up rather than with every scenario's exec error."""
        code, out = self.sh(f"cd {q(str(self.workspace))} && {self._runner_variables()} "
                            f"{q(str(self.runner_path))} --list-backends 2>&1", timeout=120)
        if code != 0:
            raise DeviceError(f"{self.serial}: the board cannot run the {self.machine} runner "
                              f"(uname -m says {self.identity.machine}; exit {code}: "
                              f"{out.strip()[-300:]}); for an x86_64 host standing in for an "
                              "aarch64 board register qemu-aarch64 with binfmt_misc")

    # Preflight -----------------------------------------------------------------------------
    def preflight(self) -> list[str]:
        problems: list[str] = []
        report: dict = {"target": self.serial, "soc": self.info.soc, "machine": self.machine,
                        "uname_m": self.identity.machine, "htp_arch": self.soc_config.htp_arch,
                        "workspace": str(self.workspace), "pushes": self.stats.as_dict()}
        files = dict(self.payload.files) if self.payload else {}
        shas = self.remote_sha256([str(r) for r in files.values()])
        for path, remote in files.items():
            if shas.get(str(remote)) != file_sha256(path.resolve()):
                problems.append(f"{remote} on the board does not match {path}")
        if self.machine != "x86_64" and self.backends and "QnnBackend" in self.backends:
            _, out = self.sh("ls /dev/fastrpc-cdsp /dev/fastrpc-cdsp-secure 2>/dev/null")
            report["fastrpc"] = out.split()
            if not out.split():
                problems.append("no /dev/fastrpc-cdsp node: the HTP cannot be reached")
        _, out = self.sh("grep MemAvailable /proc/meminfo")
        report["mem_available_kb"] = int(out.split()[1]) if len(out.split()) > 1 else None
        report["problems"] = problems
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        (self.artifacts_dir / f"preflight-{safe_name(self.serial)}.json").write_text(
            json.dumps(report, indent=1))
        self.info.details.update({"mem_available_kb": report["mem_available_kb"],
                                  "workspace": str(self.workspace)})
        return problems

    # Running -------------------------------------------------------------------------------
    def run(self, scenario: Scenario, artifacts: Path, timeout: float) -> RunOutput:
        launch = self.launch_prefix(scenario)  # the tools there, before anything is pushed
        before, content, _, run_dir = self._prepare_run(scenario, artifacts)
        server = self._fork_server(scenario)
        if server is not None:
            return self._run_forked(server, scenario, artifacts, run_dir, content, before,
                                    timeout)
        return self._run_process(scenario, artifacts, run_dir, content, before, timeout,
                                 launch)

    def _runner_variables(self, extra: dict[str, str] | None = None) -> str:
        ws = str(self.workspace)
        adsp = ";".join([ws, str(self.workspace / QNN_DIR), "/usr/lib/rfsa/adsp", "/dsp"])
        env = (f"LD_LIBRARY_PATH={q(ws)}:{q(str(self.workspace / QNN_DIR))}:\"$LD_LIBRARY_PATH\" "
               f"ADSP_LIBRARY_PATH={q(adsp)}")
        return env + "".join(f" {k}={q(v)}"
                             for k, v in sorted({**ALLOCATOR_ENV, **self.run_env,
                                                 **(extra or {})}.items()))

    # Forks ---------------------------------------------------------------------------------
    def _fork_server(self, scenario: Scenario) -> ServedRunner | None:
        if (self.isolation != "fork" or self.fork_refused or scenario.own_process
                or self.runner_path != self.workspace / RUNNER_NAME or self.payload is None):
            return None
        qnn = any(uses_qnn(m.backend) for m in scenario.models.values()) and bool(
            self.backends and "QnnBackend" in self.backends)
        server = self._servers.get(qnn)
        if server is not None and server.alive:
            return server
        if server is not None:
            self._drop_server(server)
        preload = (' --preload libQnnHtp.so --preload "$HARNESS_QNN_REAL_HTP" '
                   '--preload libQnnSystem.so') if qnn else ""
        command = (f"cd {q(str(self.workspace / 'runs'))} && ulimit -c unlimited 2>/dev/null; "
                   f"export {self._runner_variables()} && "
                   f"exec {q(str(self.runner_path))} --serve{preload}")
        self._check_not_lost()
        try:
            server = BoardForkServer(self.transport.popen(command), self.log)
        except (ForkServerError, SshError) as exc:
            if self._there():  # else the process path meets the drop and re-acquires the board
                self._refuse_forks(exc)
            return None
        self._servers[qnn] = server
        return server

    def _run_forked(self, server: ServedRunner, scenario: Scenario, artifacts: Path,
                    run_dir: PurePosixPath, content: bytes, before: PushStats,
                    timeout: float) -> RunOutput:
        child: list[str] = []
        try:
            started, done, timed_out = self._fork_exchange(server, run_dir, content, timeout,
                                                           child)
        except ForkServerError as exc:
            self._drop_server(server)
            raise self._interrupted(scenario, artifacts, child[0] if child else "", run_dir,
                                    str(exc)) from exc
        returncode = self._fork_returncode(done, timed_out)
        logs = (self._crash_logs(started.get("time"), run_dir)
                if returncode is None or returncode < 0 else {})
        return self._fork_output(done, timed_out, logs, before)

    # Processes -----------------------------------------------------------------------------
    def _run_command(self, run_dir: PurePosixPath, nonce: str,
                     extra: dict[str, str] | None = None, launch: str = "") -> str:
        """The run directory and scenario file (from stdin, kept when there), the runner in
        its own process group with a pid file, the start time, and after the exit line the
        runner's stderr and the QNN trace (`print_outputs`)."""
        directory = q(str(run_dir))
        stderr_file, trace_file = q(str(run_dir / STDERR_FILE)), q(str(run_dir / TRACE_FILE))
        env = f"{self._runner_variables(extra)} {TRACE_ENV}={trace_file}"
        return (f"mkdir -p {directory} && cd {directory} && "
                "if [ -f scenario.json ]; then cat >/dev/null; echo HARNESS_SCENARIO kept; "
                "else cat > .scenario.json.tmp && mv -f .scenario.json.tmp scenario.json && "
                "echo HARNESS_SCENARIO written; fi && : > " + trace_file + " && "
                "{ ulimit -c unlimited 2>/dev/null; echo HARNESS_START $(date +%s); "
                f"{env} setsid {launch}{q(str(self.runner_path))} scenario.json </dev/null "
                f"2>{stderr_file} & pid=$!; echo $pid > {q(PID_FILE)}; echo HARNESS_PID $pid; "
                f"wait $pid; c=$?; echo; echo HARNESS_EXIT $c; rm -f {q(PID_FILE)}"
                f"{print_outputs(stderr_file, trace_file, nonce)}; }}")

    def _run_process(self, scenario: Scenario, artifacts: Path, run_dir: PurePosixPath,
                     content: bytes, before: PushStats, timeout: float,
                     launch: str = "") -> RunOutput:
        nonce = uuid.uuid4().hex[:16]
        self._check_not_lost()
        try:
            proc = self.transport.popen(self._run_command(run_dir, nonce, scenario.run_env,
                                                          launch))
        except SshError as exc:
            raise self._offline("starting the runner", exc) from exc
        _, chunks, errors = self._output_buffers()
        deadline = time.monotonic() + timeout
        timed_out = False
        try:
            piped(proc.stdin).write(content)
            piped(proc.stdin).close()
        except OSError:
            pass
        open_streams = [piped(proc.stdout), piped(proc.stderr)]
        while open_streams:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(open_streams, [], [], min(left, 5.0))
            for stream in ready:
                chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
                if not chunk:
                    open_streams.remove(stream)
                else:
                    (chunks if stream is proc.stdout else errors).feed(chunk)
        text = chunks.text()
        pid = marker(text, "HARNESS_PID")
        if timed_out:
            proc.kill()
        proc.wait()
        stdout, outputs, notes, _, code = self._process_output(text, chunks.total, nonce)
        start = to_int(marker(stdout, "HARNESS_START"))
        if timed_out:
            self._kill_run(pid, run_dir)
            returncode = None
        elif code is None:
            cut = errors.text().strip()[-300:] or f"ssh exit {proc.returncode}"
            raise self._interrupted(scenario, artifacts, pid, run_dir, cut, stdout)
        else:
            returncode = code
        logs = self._crash_logs(start, run_dir) if returncode is None or returncode < 0 else {}
        return self._process_result(returncode, stdout, outputs, run_dir, timed_out, notes, logs,
                                    before)

    def _interrupted(self, scenario: Scenario, artifacts: Path, pid: str,
                     run_dir: PurePosixPath, cut: str, stdout: str = "") -> RunInterrupted:
        """The connection ended without the runner's exit: wait for the board (re-acquire),
        keep what the run wrote, kill what is left of it, and name the step."""
        there = self.transport.check()
        lost = None if there else self._offline(f"scenario {scenario.name}", SshError(cut))
        self._close_servers()
        if not self.lost:
            try:
                if not stdout:
                    stdout = self.transport.run(
                        f"cat {q(str(run_dir / STDOUT_FILE))} 2>/dev/null", 30)[1]
                self._kill_run(pid, run_dir)
            except DeviceError:
                pass
        output, step, kept = self._interruption(scenario, stdout, artifacts)
        if lost is None:
            return RunInterrupted(f"{self.serial}: the runner's exit status never reached the "
                                  f"host ({cut}); {kept}", output, step)
        return RunInterrupted(f"{lost}\n{kept}", output, step)

    # Crash evidence ------------------------------------------------------------------------
    def _crash_logs(self, start: int | None, run_dir: PurePosixPath) -> dict[str, str]:
        """The run's window of `journalctl` and `dmesg`, and core files in its directory;
        `evidence` says what was unavailable and why (each is optional on a board)."""
        since = f"@{start}" if start else "-5min"
        script = (
            f"echo @@journal; journalctl --no-pager -q -o short-precise --since {q(since)} "
            f"-n {LOG_LINES} 2>&1; echo \"@@rc $?\"; "
            f"echo @@dmesg; dmesg 2>&1 | tail -n {LOG_LINES}; echo \"@@rc $?\"; "
            f"echo @@cores; cd {q(str(run_dir))} 2>/dev/null && "
            f"for c in core core.*; do [ -f \"$c\" ] || continue; "
            f"[ \"$(stat -c %Y \"$c\")\" -ge {int(start or 0)} ] && "
            f"echo \"$PWD/$c $(stat -c %s \"$c\") bytes\"; done; "
            "echo @@pattern; cat /proc/sys/kernel/core_pattern 2>&1; echo @@end")
        try:
            _, out = self.sh(script, timeout=60)
        except DeviceError as exc:
            return {"evidence": f"unavailable: the board could not be asked ({exc})"}
        parts = {}
        for chunk in out.split("@@")[1:]:
            name, _, body = chunk.partition("\n")
            parts[name.strip()] = body
        logs, missing = {}, {}
        journal = parts.get("journal", "")
        rc_journal = parts.get("rc", "")
        if journal.strip() and "No journal files" not in journal and \
                "not found" not in journal and "-- No entries --" not in journal:
            logs["journalctl"] = tail(journal, LOG_LINES)
        else:
            missing["journalctl"] = journal.strip().splitlines()[0] if journal.strip() else \
                f"no output ({rc_journal.strip()})"
        dmesg = parts.get("dmesg", "")
        if dmesg.strip() and "Operation not permitted" not in dmesg and "not found" not in dmesg:
            logs["dmesg"] = tail(dmesg, LOG_LINES)
        else:
            missing["dmesg"] = dmesg.strip().splitlines()[0] if dmesg.strip() else "no output"
        cores = [l for l in parts.get("cores", "").splitlines() if l.strip()]
        pattern = parts.get("pattern", "").strip()
        if cores:
            logs["core"] = "\n".join(cores) + f"\n(core_pattern: {pattern})"
        else:
            missing["core"] = (f"no core file in {run_dir} (core_pattern {pattern!r}; a pipe "
                               "sends cores elsewhere, e.g. systemd-coredump)")
        logs["evidence"] = ("collected: " + (", ".join(k for k in logs) or "nothing") +
                            "; unavailable: " + ("; ".join(f"{k}: {v}" for k, v in
                                                           missing.items()) or "none"))
        self.evidence_unavailable = missing
        return logs

    # Dropped connections -------------------------------------------------------------------
    def _there(self) -> bool:
        return self.transport.check()

    def _reconnect(self) -> None:
        self._close_servers()
        self.transport.reconnect(self.reacquire_s)

    def _back(self, what: str) -> None:
        self.notice(f"{self.serial}: the ssh connection dropped during {what} and was "
                    "re-established; the session went on")

    # End -----------------------------------------------------------------------------------
    def _disconnect(self) -> None:
        self.transport.close()
