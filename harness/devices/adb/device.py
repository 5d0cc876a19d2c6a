"""An Android device over adb (adbutils and the adb server), running scenarios natively.

A device is built in phases, so that nothing reads a half-built session:

1. `AdbProxy.wait_online` and `identify(adb)`: what the device says about itself (SoC from
   `ro.soc.model`, else `ro.board.platform` through the SoC configs' `board_platforms`; ABI;
   Android version), as a `DeviceIdentity`;
2. `harness.config.resolve_soc_config`: which SoC config it runs with (farm entry, `--soc`,
   what it reports; `--device-config` replaces the file);
3. `AdbDevice(adb, identity, soc_config, workspace, ...)` and `setup(runner, libraries)`
   with explicit arguments: the device build's payload (`device_payload`: runner, runtime
   libraries, the interposer and QNN libraries where its runtime has QNN) for the
   resolved HTP arch (`qnn_device_libraries`, or `qnn_simulator_libraries` on an x86_64 device).

`HilSession` drives the phases and keeps the resolved config; `AdbDevice` never sees the session.

Per session the device is leased first (`harness.devices.lease`: one session per device at a
time, whatever its workspace; `--lease-wait` waits for a busy one), then gets a workspace under
/data/local/tmp (unique per session and worker), the runner and the QNN libraries pushed once,
and each `.pte` and reference tensor at most once, skipping any file whose sha256 the device
already holds. A run starts the runner as a process group leader (`setsid`) with a pid file in
its run directory, records the device time, and streams the runner's events back; a timeout
kills the whole process group; a crash collects the exit signal, the `logcat` of the run's time
window and the tombstones written since it started.

Round trips per scenario (`harness.devices.adb.transport` makes each one a single adb-server
connection with TCP_NODELAY): files the session has not seen yet (a model's `.pte` and tensors,
on first use) are checked in one shell call (sha256 of all of them) and the missing ones sent in
one `sync:` session; then one shell call (shell protocol v2) does the rest: it creates the
content-named run directory, takes the scenario file on its stdin (kept when the directory
already holds it, as in a kept workspace), starts the runner, and at its end prints the runner's
stderr and the QNN trace after markers of that run, so no `cat` follows. A scenario whose files
the session already pushed costs that one call. By default (--scenario-isolation fork) even that
call is gone: the scenario is one request to the device's `harness-runner --serve`, over a shell
stream held open for the session (`harness.devices.adb.fork`), which forks a runner that has
loaded its libraries once; a device whose server cannot serve falls back to the shell call.
A device that drops off mid-test fails that test (keeping what the run streamed) and is
re-acquired for the full window, whatever `adb connect` answers meanwhile; if it does not come
back, every later test fails at once with what happened, so the session never hangs. A session
that starts in an existing workspace kills runners an earlier session left running there.

Every adb call goes through the device's `AdbProxy` (`harness.devices.adb.transport`): a call
that fails is an `AdbError` naming the command, what adb said and what to check. Every shell
command is built with `shlex.quote` around each argument: serials, paths and model names are
untrusted input.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from pathlib import Path, PurePosixPath
from collections.abc import Callable

from harness.qnn import dsp_heap
from harness.cache import file_sha256
from harness.config import SocConfig
from harness.programs.compile import uses_qnn
from harness.devices.adb.fork import DeviceForkServer
from harness.devices.adb.identify import DeviceIdentity
from harness.devices.adb.transport import AdbError, AdbProxy
from harness.devices.base import DeviceInfo
from harness.devices.shell_device import (PID_FILE, RUNNER_NAME, SCENARIO_FILE, STDERR_FILE,
                                          STDOUT_FILE, TRACE_FILE, RunInterrupted, ServedRunner,
                                          ShellDevice)
from harness.devices.lease import DeviceLease
from harness.devices.payload import PushStats
from harness.devices.remote_run import (  # their names here before the move
    marker as _marker, print_outputs as _print_outputs, safe_name as _safe, tail as _tail,
    to_int as _int)
from harness.devices import workspace as ws_rules
from harness.errors import DeviceError
from harness.protocol.memory import ALLOCATOR_ENV
from harness.qnn.sdk import TRACE_ENV
from harness.protocol.output import RunOutput
from harness.runner.fork_server import ForkServerError
from harness.scenario import Scenario

WORKSPACE_BASE = ws_rules.ANDROID_SCRATCH
SHADOW_DIRS = ("/vendor/lib64", "/system/lib64", "/vendor/lib/rfsa/adsp", "/vendor/dsp/cdsp",
               "/system/lib/rfsa/adsp", "/odm/lib64")
FASTRPC_NODES = ("/dev/fastrpc-cdsp", "/dev/fastrpc-cdsp-secure", "/dev/adsprpc-smd")
CONNECT_S = 10.0  # how long a session start waits for its device
REACQUIRE_S = 30.0  # how long a device that dropped off mid-session is waited for
LOGCAT_LINES = 300
q = shlex.quote


# Phase 3 inputs: what to push ---------------------------------------------------------------------

def new_workspace(worker: str) -> PurePosixPath:
    """A fresh workspace directory for one session and worker."""
    return WORKSPACE_BASE / f"executorch-hil-{uuid.uuid4().hex[:8]}-{worker}"


class _ServerEndedBeforeForking(Exception):
    """The device's fork server ended before it forked the scenario (nothing of it ran)."""


# Phase 3: the device --------------------------------------------------------------------------------

class AdbDevice(ShellDevice):
    # A scenario costs a round trip or more: big explorations take an evenly spaced sample.
    exploration_limit = 300
    transport_errors = (AdbError,)
    kept_tail = "; the harness's own are removed"

    def _send(self, files: list[tuple[Path, PurePosixPath, int]]) -> None:
        """Every file in one sync session."""
        self.adb.push([(p, str(r), m) for p, r, m in files])

    def __init__(self, adb: AdbProxy, identity: DeviceIdentity,
                 soc_config: SocConfig, workspace: PurePosixPath, *, artifacts_dir: Path,
                 keep_workspace: bool = False, reacquire_s: float = REACQUIRE_S,
                 soc_source: str = "", notice: Callable[[str], None] | None = None,
                 session_id: str = "", worker: str = "master", lease_wait: float = 0.0,
                 isolation: str = "fork") -> None:
        """No I/O: everything comes in as arguments (the resolved config, the workspace, the
        session's options it uses); `setup` takes the device's lease and does the pushes."""
        super().__init__(identity.serial, soc_config, workspace, artifacts_dir=artifacts_dir,
                         keep_workspace=keep_workspace, reacquire_s=reacquire_s, notice=notice,
                         lease_wait=lease_wait, isolation=isolation)
        self.adb = adb  # every adb call of the device goes through it
        self.identity = identity
        self.adb_server: str | None = None  # --adb-server (or a place's), for replay commands
        self.device_lease = DeviceLease(adb.server, self.serial, adb.sh, session=session_id,
                                        worker=worker, notice=self.notice)
        details = self._config_details({"model": identity.model.replace(" ", "_")}, soc_source,
                                       identity.soc, soc_config.soc)
        self.info = DeviceInfo(self.serial, "adb", soc_config.soc, identity.abi, identity.android,
                               details)
        self.runner_source: Path | None = None
        self.qnn_libraries: dict[Path, PurePosixPath] = {}
        self.preflight_report: dict = {}
        self._server_env: dict[bool, tuple] = {}  # the run variables each server started with

    def _shell(self, command: str, timeout: float) -> tuple[int, str]:
        return self.adb.sh(command, timeout)

    def prop(self, name: str) -> str:
        return self.sh(f"getprop {q(name)}")[1].strip()

    # Workspace and pushes ------------------------------------------------------------------
    def setup(self, runner: Path, qnn_libraries: dict[Path, PurePosixPath],
              env: dict[str, str] | None = None, backends: tuple[str, ...] | None = None,
              dsp_heap_note: str = "") -> None:
        """Take the device's lease (waiting up to `lease_wait` seconds for another session's),
        reclaim the workspaces of sessions that are gone (`ShellDevice._reclaim`), then create
        the workspace (killing runners an earlier session left running in it) and
        push the runner and the QNN libraries, each only when the device lacks its bytes.
        `env` is what every run gets (the interposer's settings, the DSP heap reading's)."""
        self.runner_source = runner
        self.qnn_libraries = dict(qnn_libraries)
        self.run_env = dict(env or {})
        self.dsp_heap = dsp_heap.requested(self.run_env)
        self.dsp_heap_note = dsp_heap_note
        self.backends = backends
        if backends is not None:
            self.info.details["backends"] = ",".join(backends) or "none"
        self.device_lease.acquire(self.lease_wait)
        try:
            self._reclaim()
            self._install()
        except BaseException:
            self.device_lease.release()
            raise

    def _install(self) -> None:
        self._take_workspace()
        runner = self.runner_source
        entries = [(runner, self.workspace / RUNNER_NAME, 0o755)] if runner else []
        entries += [(path, remote, 0o644) for path, remote in self.qnn_libraries.items()]
        self._push_payload(entries)

    def _pushed(self) -> list[PurePosixPath]:
        return list(self.qnn_libraries.values())

    # Preflight -----------------------------------------------------------------------------
    def preflight(self) -> list[str]:
        problems: list[str] = []
        report: dict = {"serial": self.serial, "soc": self.info.soc, "abi": self.info.abi,
                        "htp_arch": self.soc_config.htp_arch,
                        "soc_config": str(self.soc_config.path),
                        "workspace": str(self.workspace), "pushes": self.stats.as_dict()}
        libs = self.qnn_libraries
        shas = self.remote_sha256([str(r) for r in libs.values()])
        report["qnn_libraries"] = {}
        for path, remote in libs.items():
            want, got = file_sha256(path.resolve()), shas.get(str(remote))
            report["qnn_libraries"][str(remote)] = {"source": str(path), "sha256": got,
                                                    "matches_sdk": want == got}
            if want != got:
                problems.append(f"{remote} on the device does not match {path} (sha256 {got} != {want})")
        _, out = self.sh(" ".join(["ls", "-1"] + [q(f"{d}/") + "libQnnHtp*" for d in SHADOW_DIRS])
                         + " 2>/dev/null")
        shadows = [l.strip() for l in out.splitlines() if l.strip().startswith("/")]
        report["shadowing_libraries"] = shadows
        if self.info.abi == "x86_64":
            report["fastrpc"] = "not needed: x86_64 device runs the HTP simulator"
        elif self.backends is not None and "QnnBackend" not in self.backends:
            report["fastrpc"] = "not needed: the device's runtime has no QNN backend"
        else:
            _, out = self.sh("ls " + " ".join(q(n) for n in FASTRPC_NODES) + " 2>/dev/null")
            nodes = [l.strip() for l in out.splitlines() if l.strip()]
            report["fastrpc"] = nodes
            if not nodes:
                problems.append(f"no fastrpc device node ({', '.join(FASTRPC_NODES)}): the HTP "
                                "cannot be reached from this shell")
        _, out = self.sh("grep MemAvailable /proc/meminfo")
        report["mem_available_kb"] = int(out.split()[1]) if len(out.split()) > 1 else None
        report["problems"] = problems
        self.preflight_report = report
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        (self.artifacts_dir / f"preflight-{_safe(self.serial)}.json").write_text(
            json.dumps(report, indent=1))
        self.info.details.update({"mem_available_kb": report["mem_available_kb"],
                                  "shadowing_libQnnHtp": (len(shadows) and ",".join(shadows)) or "none",
                                  "workspace": str(self.workspace)})
        return problems

    # Running -------------------------------------------------------------------------------
    def run(self, scenario: Scenario, artifacts: Path, timeout: float) -> RunOutput:
        launch = self.launch_prefix(scenario)  # the tools there, before anything is pushed
        before, content, sha, run_dir = self._prepare_run(scenario, artifacts)
        for retry in (True, False):  # a second server when the first ended before forking
            server = self._fork_server(scenario)
            if server is None:
                break
            try:
                return self._run_forked(server, scenario, artifacts, run_dir, content, sha,
                                        before, timeout, retry=retry)
            except _ServerEndedBeforeForking as gone:
                self.log.warning("fork server %s ended before it forked scenario %s (%s); a new "
                                 "server runs it", server.pid, scenario.name, gone)
        nonce = uuid.uuid4().hex[:16]
        text, timed_out, pid, start, cut, stream_total = self._stream(
            self._run_command(run_dir, scenario_sha=sha, nonce=nonce, env=scenario.run_env,
                              launch=launch),
            timeout, stdin=content)
        stdout, outputs, notes, sent, code = self._process_output(text, stream_total, nonce)
        if sent:
            self._remote_sha[str(run_dir / SCENARIO_FILE)] = sha
        if timed_out:
            self._kill_run(pid, run_dir)
            returncode = None
        elif code is None:
            raise self._interrupted(scenario, stdout, artifacts, pid, run_dir, cut)
        else:
            returncode = code
        self.log.debug("scenario %s: %s (%d pushed)", scenario.name,
                       "timed out" if timed_out else f"exit {returncode}",
                       self.stats.pushed - before.pushed)
        logs = self._crash_logs(start) if returncode is None or returncode < 0 else {}
        return self._process_result(returncode, stdout, outputs, run_dir, timed_out, notes, logs,
                                    before)

    # Forks of a served runner (harness.devices.adb.fork) -----------------------------------
    def _fork_server(self, scenario: Scenario) -> ServedRunner | None:
        """The device's fork server for this scenario (one with the QNN libraries loaded for
        scenarios with QNN programs, one without for the rest, as on the simulator), started on
        first use; None when scenarios run as processes: --scenario-isolation process, a test's
        own runner in place of the harness's, or a server that could not start (said once)."""
        if (self.isolation != "fork" or self.fork_refused or self.runner_source is None
                or scenario.own_process
                or self.runner_path != self.workspace / RUNNER_NAME):
            return None
        qnn = bool(self.qnn_libraries) and any(uses_qnn(m.backend)
                                               for m in scenario.models.values())
        key = tuple(sorted(self.run_env.items()))  # the loader reads its variables at start
        held = self._servers.get(qnn)
        if held is not None and self._server_env.get(qnn) == key and held.alive:
            return held
        if held is not None:
            self._drop_server(held)
        try:
            server = DeviceForkServer(self.adb, self._serve_command(qnn), self.log)
        except ForkServerError as exc:
            if self._there():  # else the process path meets the drop and re-acquires the device
                self.log.warning("fork server refused: %s", exc)
                self._refuse_forks(exc)
            return None
        self.log.info("fork server %s ready on the device (preloaded %s)", server.pid,
                      ", ".join(server.preloaded) or "nothing")
        self._servers[qnn] = server
        self._server_env[qnn] = key
        return server

    def _serve_command(self, qnn: bool) -> str:
        """`harness-runner --serve` in `runs/`, with every variable a run's command gives the
        runner but the trace's; with `qnn`, the QNN libraries preloaded by the names the
        runtime and the interposer open (the real library's path from the interposer's
        variable, where the device has one)."""
        preload = (' --preload libQnnHtp.so ${HARNESS_QNN_REAL_HTP:+--preload '
                   '"$HARNESS_QNN_REAL_HTP"} --preload libQnnSystem.so') if qnn else ""
        return (f"cd {q(str(self.workspace / 'runs'))} && export {self._runner_variables()} && "
                f"exec {q(str(self.runner_path))} --serve{preload}")

    def _run_forked(self, server: ServedRunner, scenario: Scenario, artifacts: Path,
                    run_dir: PurePosixPath, content: bytes, sha: str, before: PushStats,
                    timeout: float, retry: bool = False) -> RunOutput:
        """One request: the run directory (names relative to the server's `runs/`), the
        scenario file unless there, the trace emptied, the pid file, and the runner's stdout,
        stderr and trace back with its exit status. A timeout kills the fork's process group;
        a cut stream ends the test as the process path's does, with what the run wrote.

        With `retry`, a server whose stream ends before it reports a fork, on a device still
        there, raises _ServerEndedBeforeForking (the caller runs the scenario on a new server):
        a server killed while idle can still look alive, its end not yet through the adb
        server, and nothing of the scenario has run (a fork it made before it died is killed)."""
        child: list[str] = []
        try:
            started, done, timed_out = self._fork_exchange(server, run_dir, content, timeout,
                                                           child)
        except ForkServerError as exc:
            pid = child[0] if child else ""
            if pid:  # it forked, so it wrote the scenario file
                self._remote_sha[str(run_dir / SCENARIO_FILE)] = sha
            ended = server.ended  # (not a refusal the server replied with)
            self._drop_server(server)
            if retry and ended and not pid and self._there():
                self._kill_run("", run_dir)  # a fork made just before the server died
                raise _ServerEndedBeforeForking(str(exc)) from exc
            raise self._interrupted(scenario, "", artifacts, pid, run_dir, str(exc),
                                    stdout_file=run_dir / STDOUT_FILE) from exc
        self._remote_sha[str(run_dir / SCENARIO_FILE)] = sha
        returncode = self._fork_returncode(done, timed_out)
        self.log.debug("scenario %s: %s (fork %s)", scenario.name,
                       "timed out" if timed_out else f"exit {returncode}", child[0])
        logs = (self._crash_logs(started.get("time")) if returncode is None or returncode < 0
                else {})
        return self._fork_output(done, timed_out, logs, before)

    def _read_back(self, path: PurePosixPath) -> str:
        """A file of an interrupted run (what its runner streamed), or "" when unreadable."""
        try:
            return self.adb.sh(f"cat {q(str(path))} 2>/dev/null", 30)[1]
        except AdbError:
            return ""

    def _run_command(self, run_dir: PurePosixPath, scenario_sha: str = "",
                     nonce: str = "", env: dict[str, str] | None = None,
                     launch: str = "") -> str:
        """The runner in its own process group (`setsid`), so a timeout can kill everything it
        started; its pid in the run's pid file while it may run (for a later session to find);
        the device time at the start, so crash logs are taken from the run's own window.

        With `scenario_sha`, the command first creates the run directory and writes the
        scenario file from its stdin (unless the directory holds those bytes already: it prints
        `HARNESS_SCENARIO written` or `kept`); with `nonce`, it ends by printing the runner's
        stderr and the QNN trace after that run's markers (`split_outputs`). Without either it
        runs in an existing directory, as a stream of the shell protocol v1 can. `launch`: the
        scenario's wrappers, quoted (`launch_prefix`), between setsid and the runner."""
        program = q(str(self.runner_path))
        directory = q(str(run_dir))
        stderr_file, trace_file = q(str(run_dir / STDERR_FILE)), q(str(run_dir / TRACE_FILE))
        variables = f"{self._runner_variables(env)} {TRACE_ENV}={trace_file}"
        # Every process the shell starts costs about a millisecond of the scenario's time, so
        # the command sticks to shell builtins where it can: the run directory is named by the
        # scenario's sha256 and its file written whole (temporary file, then mv), so a
        # scenario.json there holds those bytes; `: >` empties the trace; mksh and bash give the
        # time without `date`.
        if scenario_sha:
            enter = (f"{{ cd {directory} 2>/dev/null || {{ mkdir -p {directory} && "
                     f"cd {directory}; }}; }} && "
                     "if [ -f scenario.json ]; then cat >/dev/null; echo HARNESS_SCENARIO kept; "
                     "else cat > .scenario.json.tmp && mv -f .scenario.json.tmp scenario.json && "
                     "echo HARNESS_SCENARIO written; fi && ")
        else:
            enter = f"cd {directory} && "
        outputs = (_print_outputs(stderr_file, trace_file, nonce) if nonce else "")
        return (f"{enter}: > {trace_file} && {{ now=${{EPOCHREALTIME:-$(date +%s)}}; "
                f"echo HARNESS_START ${{now%%[.,]*}}; "
                f"{variables} setsid {launch}{program} scenario.json </dev/null 2>{stderr_file} & "
                f"pid=$!; echo $pid > {q(PID_FILE)}; echo HARNESS_PID $pid; "
                # The exit line starts a line of its own whatever the runner's last line was
                # (a runtime's text without a newline would otherwise hide it).
                f"wait $pid; c=$?; echo; echo HARNESS_EXIT $c; rm -f {q(PID_FILE)}{outputs}; }}")

    def _runner_variables(self, extra: dict[str, str] | None = None) -> str:
        """The runner's variables as shell assignments (the trace's aside): the workspace first
        on the library path, the DSP's library path, the allocator's and the run's settings."""
        ws = str(self.workspace)
        adsp = ";".join([ws, "/vendor/lib/rfsa/adsp", "/vendor/dsp/cdsp", "/system/lib/rfsa/adsp",
                         "/dsp"])
        env = f"LD_LIBRARY_PATH={q(ws)}:\"$LD_LIBRARY_PATH\" ADSP_LIBRARY_PATH={q(adsp)}"
        return env + "".join(f" {k}={q(v)}"
                             for k, v in sorted({**ALLOCATOR_ENV, **self.run_env,
                                                 **(extra or {})}.items()))

    def _stream(self, command: str, timeout: float,
                stdin: bytes = b"") -> tuple[str, bool, str, int | None, str, int]:
        """Run `command` (shell protocol v2, `stdin` sent whole and closed) and read its stdout
        until it ends or `timeout` passes. Returns (text, timed out, runner pid, device time at
        start, how the stream was cut or "", bytes the stream carried); what the shell itself
        wrote on stderr (a directory it could not create) is the cut's reason when nothing
        else is. The text keeps at most the output limit of the runner's stdout (its head and
        tail) and room after it for the stderr and trace the command prints, within theirs."""
        self._check_not_lost()
        try:
            stream = self.adb.stream(command, stdin)
        except AdbError as exc:
            raise self._offline("starting the runner", exc) from exc
        _, chunks, errors = self._output_buffers()
        deadline = time.monotonic() + timeout
        timed_out, cut = False, ""
        try:
            while not stream.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                try:
                    out, err = stream.read(min(remaining, 5.0))
                except TimeoutError:
                    continue
                except OSError as exc:
                    cut = str(exc) or type(exc).__name__
                    break
                chunks.feed(out)
                errors.feed(err)
        finally:
            stream.close()
        text = chunks.text()
        shell_err = errors.text().strip()
        if shell_err and not cut:
            cut = f"the device's shell said: {shell_err[-300:]}"
        return (text, timed_out, _marker(text, "HARNESS_PID"),
                _int(_marker(text, "HARNESS_START")), cut, chunks.total)

    def _interrupted(self, scenario: Scenario, stdout: str, artifacts: Path, pid: str,
                     run_dir: PurePosixPath, cut: str,
                     stdout_file: PurePosixPath | None = None) -> RunInterrupted:
        """The stream ended without the runner's exit: keep what it streamed (a fork's
        `stdout_file` on the device, read once the device is there), name the step, and
        kill the run's processes once the device is there (re-acquired if it went away)."""
        online = self._there()
        lost = None if online else self._offline(f"scenario {scenario.name}", None)
        # A cut stream usually means the device's transport was cut, and every stream held
        # over it with it (an idle fork server's too, its end maybe not through the adb server
        # yet): start new servers on next use rather than find each one dead.
        self._close_servers()
        if stdout_file is not None and not self.lost:
            stdout = self._read_back(stdout_file)
        output, step, kept = self._interruption(scenario, stdout, artifacts)
        if not self.lost:  # there, or back (re-acquiring killed runners with a pid file)
            try:
                self._kill_run(pid, run_dir)
            except DeviceError:
                pass
            full = self._storage_note()
            if full:
                output.notes.append(full)
                cut = f"{cut}; {full}" if cut else full
        if lost is None:
            why = f" ({cut})" if cut else ""
            return RunInterrupted(f"{self.serial}: the runner's exit status never reached the "
                                  f"host{why or ' (the adb stream closed)'}; {kept}", output, step)
        return RunInterrupted(f"{lost}\n{kept}", output, step)

    def _crash_logs(self, start: int | None) -> dict[str, str]:
        """logcat and tombstones of this run's own time window (device time `start` on): a
        tombstone older than the run belongs to something else and is never attached."""
        if start is None:
            return {"logcat": _tail(self.sh("logcat -d -t 300 2>&1")[1], LOGCAT_LINES)}
        since = q(f"{start}.000")
        logs = {"logcat": _tail(self.sh(f"logcat -d -t {since} 2>&1 || logcat -d -t 300 2>&1")[1],
                                LOGCAT_LINES)}
        _, out = self.sh("cd /data/tombstones 2>/dev/null && stat -c '%Y %n' -- * 2>/dev/null")
        fresh = []
        for line in out.splitlines():
            mtime, _, name = line.strip().partition(" ")
            if mtime.isdigit() and int(mtime) >= start and name and not name.endswith(".pb"):
                fresh.append((int(mtime), name))
        for i, (_, name) in enumerate(sorted(fresh, reverse=True)[:3]):
            key = "tombstone" if i == 0 else f"tombstone-{_safe(name)}"
            logs[key] = self.sh(f"cat {q('/data/tombstones/' + name)} 2>&1")[1]
        return logs

    # Offline handling ----------------------------------------------------------------------
    def _there(self) -> bool:
        return self.adb.online()

    def _reconnect(self) -> None:
        self.adb.wait_online(self.reacquire_s)
        self._close_servers()  # their streams went with the device

    def _words(self, exc: Exception) -> str:
        return exc.reason if isinstance(exc, AdbError) else str(exc)

    def _failed(self, what: str, exc: Exception | None, why: str) -> DeviceError:
        """A device still there fails with the adb call's AdbError, saying `what` it did."""
        if isinstance(exc, AdbError):
            return exc.while_(what)
        return super()._failed(what, exc, why)

    def replay_args(self) -> list[str]:
        return ["--device", self.serial] + (["--adb-server", self.adb_server]
                                            if self.adb_server else [])

    def runner_description(self) -> str:
        how = ("a fork of harness-runner --serve on the device" if self.isolation == "fork"
               else "a new process")
        return f"{self.runner_kind}; each scenario {how}"

