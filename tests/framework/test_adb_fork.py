"""Scenarios as forks of the device's `harness-runner --serve` (harness.devices.adb.fork), on
the loopback device through the real adb server: the same verdicts as a process per scenario,
one request on the held-open stream per scenario, and what a phone needs when a fork goes
wrong: a hung fork killed with its process group while the server goes on, a crashed fork's
signal and logs, a cut stream naming the step and killing the fork, and a server that cannot
serve leaving the session on processes, said once.

The runner is the real native runner; a run is made to hang by turning a `.pte` the device
already holds into a FIFO nobody writes (loading it blocks), which is how a fork can hang
without a test runner in the harness's place.
"""

from __future__ import annotations

import os
import shlex
import signal
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.devices.shell_device import RUNNER_NAME, STDOUT_FILE, RunInterrupted
from harness.drive.driver import ScenarioDriver
from harness.scenario import Scenario
from harness.scenario.library import s1_two_modules, s4_cleanup_reload
from harness.session import HilSession
from harness.results.xnnpack import cache_options

from adb_options import adb_options
from phones import phone  # noqa: F401 -- the module's loopback phone fixture
from processes import wait_gone
from run_parity import same_steps

pytestmark = pytest.mark.skipif(shutil.which("adb") is None,
                                reason="the adb client/server (Debian package adb) is not installed")


def open_device(tmp_path: Path, phone, hil_session, **overrides):
    session = HilSession(adb_options(tmp_path, phone.serial, runner=hil_session.options.runner,
                                     **overrides))
    return session, session.device


@pytest.fixture
def device(tmp_path, phone, hil_session):
    _session, device = open_device(tmp_path, phone, hil_session)
    yield device
    device.close()


def simple(model, name: str) -> Scenario:
    return Scenario(name).load_module("A", model).execute("A", "forward").destroy_module("A")


def on_host(phone, device, remote) -> Path:
    """Where a device path of the loopback lies on this host."""
    return phone.sandbox / str(remote).lstrip("/")


def hanging(device, compiled_model, name: str) -> Scenario:
    """A scenario whose second step blocks: module A loads with its XNNPACK weight cache at a
    FIFO nobody writes, so loading its method reads the cache forever."""
    fifo = f"{device.scratch_dir()}/blocking-cache-{name}.bin"
    code, out = device.command(["mkfifo", fifo])
    assert code == 0, out
    model = compiled_model("xnn_convs", "fp32")
    return (Scenario(name).load_module("A", model, backend_options=cache_options(fifo))
            .load_method("A", "conv_nobias"))


def blocked_fork(runs: Path, name: str, seconds: float = 120) -> int:
    """The pid of the fork running scenario `name` once it has finished step 0 and blocks in
    step 1 (what it wrote is on the device's disk), polled: the push and a new server come
    first, and this host may be busy."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for run_dir in runs.glob(f"*-{name}"):
            pid = (run_dir / "runner.pid").read_text().strip() if (
                run_dir / "runner.pid").exists() else ""
            out = run_dir / STDOUT_FILE
            if pid and out.exists() and '"index": 0' in out.read_text(errors="replace"):
                return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no fork of {name!r} reached step 1 within {seconds:.0f} s")


def in_background(target) -> tuple[threading.Thread, list[BaseException]]:
    """`target` on a thread; what it raised is kept for the test to re-raise."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def test_forks_give_what_processes_give_in_one_request_each(tmp_path, phone, hil_session,
                                                             compiled_model):
    """S1 (fails on 1.5.1 at the survivor's execute) and S4 as forks and as processes on the
    same device: the same statuses, error codes, live QNN counts and outputs, the QNN trace
    back with each run. A scenario whose files are there costs no new adb connection: one
    request on the stream the server holds open, served by the same server every time."""
    _session, device = open_device(tmp_path, phone, hil_session)
    model = compiled_model("linear_relu")
    driver = ScenarioDriver(device, tmp_path / "runs", 300)
    try:
        warm = driver.run(simple(model, "warm"))
        assert [s.status for s in warm.steps] == ["ok", "ok", "ok"]
        server, = device._servers.values()
        sent: list[dict] = []
        connections: list[str] = []
        real_send, real_connect = server.send, device.adb.client.make_connection
        main = threading.current_thread()

        def counted(*args, **kwargs):
            if threading.current_thread() is main:  # not the lease's heartbeat
                connections.append("connection")
            return real_connect(*args, **kwargs)

        server.send = lambda request: (sent.append(request), real_send(request))[1]
        device.adb.client.make_connection = counted
        try:
            forks = [driver.run(sc, allow_crash=True)
                     for sc in (s1_two_modules(model, "A"), s4_cleanup_reload(model))]
        finally:
            del device.adb.client.make_connection
        assert len(sent) == 2 and connections == [], (sent, connections)
        assert device._servers[True] is server and server.alive
        device.isolation = "process"
        processes = [driver.run(sc, allow_crash=True)
                     for sc in (s1_two_modules(model, "A"), s4_cleanup_reload(model))]
    finally:
        device.close()
    for fork, process in zip(forks, processes):
        assert fork.completed and process.completed, fork.crash_report()
        same_steps(fork, process)
        assert "context_create" in fork.output.trace_text
    s1 = forks[0]
    assert s1.output.returncode == 1 and any(s.status == "error" for s in s1.steps)
    assert device.runs == {"fork": 3, "process": 2}
    assert any("3 as forks of the device's harness-runner --serve, 2 as new runner processes"
               in line for line in device.summary())


def test_a_hung_fork_is_killed_with_its_group_and_the_server_goes_on(device, phone, tmp_path,
                                                                    compiled_model):
    model = compiled_model("linear_relu")
    device.run(simple(model, "warm"), tmp_path / "warm", 300)
    scenario = hanging(device, compiled_model, "hang")
    started = time.monotonic()
    out = device.run(scenario, tmp_path / "hang", 5)
    assert out.timed_out and out.returncode is None
    assert time.monotonic() - started < 40
    assert '"index": 0' in out.stdout  # what the fork wrote before it hung came back
    run_dir = next(on_host(phone, device, device.workspace / "runs").glob("*-hang"))
    assert not (run_dir / "runner.pid").exists()
    server = device._servers[False]  # the server without QNN, for the XNNPACK program
    after = Scenario("after").load_module("A", compiled_model("xnn_convs", "fp32"))
    again = device.run(after.load_method("A", "conv_nobias"), tmp_path / "after", 300)
    assert again.returncode == 0 and not again.timed_out, again.stderr
    assert device._servers[False] is server and server.alive


def test_a_crashed_fork_reports_its_signal_and_the_runs_logs(device, phone, tmp_path,
                                                            compiled_model):
    """A fork killed by SIGSEGV while it runs (here: from outside, while it is blocked): the
    run's exit is the signal, its logs are collected, the last completed step is named."""
    model = compiled_model("linear_relu")
    device.run(simple(model, "warm"), tmp_path / "warm", 300)
    scenario = hanging(device, compiled_model, "crash")
    runs = on_host(phone, device, device.workspace / "runs")

    def segv() -> None:
        os.kill(blocked_fork(runs, "crash"), signal.SIGSEGV)

    thread, errors = in_background(segv)
    result = ScenarioDriver(device, tmp_path / "crash", 180).run(scenario, allow_crash=True)
    thread.join()
    assert not errors, errors
    assert result.output.returncode == -11
    assert "logcat" in result.output.logs
    report = result.crash_report()
    assert "signal SIGSEGV" in report and "last completed step: load_module(A)" in report, report


def test_a_cut_stream_names_the_step_and_kills_the_fork(tmp_path, phone, hil_session,
                                                        compiled_model):
    """The adb server drops the server's stream mid-run (its transport disconnected and
    connected again at once) while the device stays: the test fails naming the step the run
    was in, from what the fork wrote on the device; the fork is killed; the next run starts a
    new server."""
    _session, device = open_device(tmp_path, phone, hil_session, reacquire_s=8)
    model = compiled_model("linear_relu")
    try:
        device.run(simple(model, "warm"), tmp_path / "warm", 300)
        scenario = hanging(device, compiled_model, "cut")
        runs = on_host(phone, device, device.workspace / "runs")
        pids: list[int] = []

        def cut() -> None:
            pids.append(blocked_fork(runs, "cut"))
            subprocess.run(["adb", "disconnect", phone.serial], capture_output=True)
            subprocess.run(["adb", "connect", phone.serial], capture_output=True)

        thread, errors = in_background(cut)
        with pytest.raises(RunInterrupted) as exc:
            device.run(scenario, tmp_path / "cut", 180)
        thread.join()
        assert not errors, errors
        assert exc.value.step.startswith("step 1 load_method(A.conv_nobias)"), exc.value.step
        assert '"index": 0' in exc.value.output.stdout
        assert pids and wait_gone(pids[0]), "the interrupted fork still runs"
        assert device._servers == {}
        after = device.run(simple(model, "after"), tmp_path / "after", 300)
        assert after.returncode == 0, after.stderr
        assert device.runs["fork"] == 2
    finally:
        device.close()


def test_a_server_that_cannot_serve_leaves_the_session_on_processes(device, tmp_path,
                                                                   compiled_model):
    """A runner whose `--serve` refuses (as one would whose libraries started a thread): the
    run goes on as a new process, the session says why once, and the summary counts it."""
    real = device.workspace / "real-runner"
    device.sh(f"cp {shlex.quote(str(device.workspace / RUNNER_NAME))} {shlex.quote(str(real))}")
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        "if [ \"$1\" = --serve ]; then\n"
        "  echo '{\"ready\": 1, \"threads\": 2, \"error\": \"not safe to fork: 2 threads after "
        "loading the libraries (fork copies only one)\"}'; exit 2\n"
        "fi\n"
        "exec \"$(dirname \"$0\")/real-runner\" \"$@\"\n")
    device.push_files({wrapper: device.workspace / RUNNER_NAME}, mode=0o755)
    notices: list[str] = []
    device.notice = notices.append
    model = compiled_model("linear_relu")
    for name in ("first", "second"):
        out = device.run(simple(model, name), tmp_path / name, 300)
        assert out.returncode == 0, out.stderr
    assert device.runs == {"fork": 0, "process": 2}
    assert len(notices) == 1 and "not safe to fork: 2 threads" in notices[0], notices
    assert any("(the fork server could not serve: " in line for line in device.summary())


def test_a_changed_run_environment_gets_a_new_server(device, tmp_path, compiled_model):
    """The loader and malloc read their variables once, at the server's start: a run whose
    variables changed is served by a server started with them."""
    model = compiled_model("linear_relu")
    device.run(simple(model, "before"), tmp_path / "before", 300)
    first, = device._servers.values()
    device.run_env = {**device.run_env, "HARNESS_TEST_VARIABLE": "1"}
    out = device.run(simple(model, "after"), tmp_path / "after", 300)
    assert out.returncode == 0, out.stderr
    second, = device._servers.values()
    assert second is not first and second.pid != first.pid and not first.alive


@pytest.mark.parametrize("end_seen", [True, False], ids=["end-seen", "end-not-yet-seen"])
def test_a_server_that_died_between_scenarios_is_replaced(device, tmp_path, compiled_model,
                                                          monkeypatch, end_seen):
    """Killed on the device while idle (as a phone's low-memory killer might): the next
    scenario gets a new server instead of failing on the dead one's stream, whether the
    server's end has come through the adb server before that scenario (the harness polls the
    stream first) or not yet (the request meets the end before any fork: a new server runs
    the scenario)."""
    model = compiled_model("linear_relu")
    device.run(simple(model, "before"), tmp_path / "before", 300)
    first, = device._servers.values()
    os.kill(first.pid, signal.SIGKILL)  # the loopback's device processes are this host's
    assert wait_gone(first.pid, 30)
    if end_seen:
        end = time.monotonic() + 30
        while first.alive and time.monotonic() < end:
            time.sleep(0.05)
        assert not first.alive
    else:
        alive = type(first).alive
        monkeypatch.setattr(type(first), "alive", property(
            lambda server: True if server is first else alive.fget(server)))
    out = device.run(simple(model, "after"), tmp_path / "after", 300)
    assert out.returncode == 0, out.stderr
    second, = device._servers.values()
    assert second is not first and first.stream.closed and second.alive
    assert device.runs == {"fork": 2, "process": 0}


def blocked_runner(runs: Path, name: str, seconds: float = 120) -> int:
    """The pid of the runner (fork or process) of scenario `name` once it blocks opening its
    FIFO weight cache (`hanging`'s step 1), whichever way it was started."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for pid_file in runs.glob(f"*-{name}/runner.pid"):
            pid = pid_file.read_text().strip() if pid_file.exists() else ""
            try:  # opening a FIFO nobody writes waits in the kernel's wait_for_partner
                waits = [(t / "wchan").read_text() for t in Path(f"/proc/{pid}/task").iterdir()]
            except OSError:
                continue
            if "wait_for_partner" in waits:
                return int(pid)
        time.sleep(0.05)
    raise AssertionError(f"no runner of {name!r} blocked in step 1 within {seconds:.0f} s")


@pytest.mark.parametrize("isolation", ["fork", "process"])
def test_a_crash_after_output_without_a_newline_keeps_its_signal_and_logs(
        device, phone, tmp_path, compiled_model, isolation):
    """The runner's last stdout line has no newline (a runtime's own text) when it is killed
    by SIGSEGV: the run's exit is still the signal, with its logs and the last completed step,
    not "the exit status never reached the host"."""
    device.isolation = isolation
    model = compiled_model("linear_relu")
    device.run(simple(model, "warm"), tmp_path / "warm", 300)
    name = f"torn-{isolation}"
    scenario = hanging(device, compiled_model, name)
    runs = on_host(phone, device, device.workspace / "runs")

    def torn_line_then_segv() -> None:
        pid = blocked_runner(runs, name)
        with open(f"/proc/{pid}/fd/1", "a") as out:  # the runner's own stdout
            out.write("QNN says something without a newline")
        os.kill(pid, signal.SIGSEGV)

    thread, errors = in_background(torn_line_then_segv)
    result = ScenarioDriver(device, tmp_path / name, 180).run(scenario, allow_crash=True)
    thread.join()
    assert not errors, errors
    assert result.output.returncode == -11, result.output.stdout[-500:]
    assert "logcat" in result.output.logs
    assert "QNN says something without a newline" in result.output.stdout
    report = result.crash_report()
    assert "signal SIGSEGV" in report and "last completed step: load_module(A)" in report, report


def test_a_flooding_fork_is_cut_to_the_output_limit(device, phone, tmp_path, compiled_model,
                                                   monkeypatch):
    """A fork's stdout grows to 6 MB (the runtime printing) before it dies: the server sends
    back its head and tail within the limit (1 MB here) and the verdict says so."""
    monkeypatch.setenv("EXECUTORCH_HIL_OUTPUT_LIMIT_MB", "1")
    model = compiled_model("linear_relu")
    device.run(simple(model, "warm"), tmp_path / "warm", 300)
    scenario = hanging(device, compiled_model, "flood")
    runs = on_host(phone, device, device.workspace / "runs")

    def flood_then_segv() -> None:
        pid = blocked_runner(runs, "flood")
        with open(f"/proc/{pid}/fd/1", "a") as out:
            out.write("a runtime log line\n" * 330_000)
        os.kill(pid, signal.SIGSEGV)

    thread, errors = in_background(flood_then_segv)
    result = ScenarioDriver(device, tmp_path / "flood", 180).run(scenario, allow_crash=True)
    thread.join()
    assert not errors, errors
    assert result.output.returncode == -11
    assert len(result.output.stdout) < 1.1e6
    assert '"index": 0' in result.output.stdout[:4000]  # the head keeps the first steps
    assert any("output limit reached" in n and "to stdout" in n for n in result.output.notes)
    assert "output limit reached" in result.crash_headline()
