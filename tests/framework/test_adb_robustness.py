"""What a phone needs of the adb path, against the loopback device through the real adb server:
re-acquiring a device for the whole window, keeping an interrupted run's output, crash logs of
the run's own time window, killing a hung runner's whole process group, and killing runners an
earlier session left in a kept workspace.

Runners here are small shell scripts pushed in place of the native runner, so everything around
them (launch, streaming, kill, logs) is the code that runs against phones. The loopback runs
device commands as host processes, so the tests can look at those processes directly.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.devices.shell_device import RUNNER_NAME, RunInterrupted
from harness.drive.driver import ScenarioDriver
from harness.errors import DeviceError
from harness.loopback import LoopbackDevice, connect, start_server
from harness.qnn.sdk import discover
from harness.scenario import Scenario
from harness.session import HilSession

from adb_options import adb_options
from processes import running, wait_gone

pytestmark = pytest.mark.skipif(shutil.which("adb") is None,
                                reason="the adb client/server (Debian package adb) is not installed")

STEP0 = ('echo \'HARNESS_EVENT {"event": "step", "index": 0, "op": "load_module", "status": "ok", '
         '"trace_offset": 0}\'\n')


options = adb_options


@pytest.fixture(scope="module")
def sdk():
    return discover()


class Phone:
    """A loopback phone that can be unplugged and plugged in again on the same port with the
    same storage, like a phone that reboots."""

    def __init__(self, sandbox: Path, env: dict[str, str]) -> None:
        self.sandbox_dir, self.env, self.port = sandbox, env, 0
        self.dev: LoopbackDevice | None = None

    def start(self) -> Phone:
        self.dev = LoopbackDevice(self.sandbox_dir, port=self.port, extra_env=self.env).start()
        self.port = self.dev.port
        return self

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sandbox(self) -> Path:
        return self.dev.sandbox

    def stop(self) -> None:
        if self.dev is not None:
            self.dev.stop()

    def leftovers(self) -> list[int]:
        """Runner pids whose pid files are still in the sandbox's workspaces."""
        pids = []
        for f in self.sandbox_dir.glob("data/local/tmp/*/runs/*/runner.pid"):
            text = f.read_text().strip()
            if text.isdigit():
                pids.append(int(text))
        return pids


@pytest.fixture
def phone(tmp_path, sdk):
    start_server()
    p = Phone(tmp_path / "phone", sdk.device_environment()).start()
    connect(p.serial)
    yield p
    p.stop()
    subprocess.run(["adb", "disconnect", p.serial], capture_output=True)
    for pid in p.leftovers():  # runners a vanished loopback left on the host
        kill_group(pid)


def kill_group(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


_OPENED: list[HilSession] = []


@pytest.fixture(autouse=True)
def _close_sessions(request):
    """Each test's sessions end with it (their leases and heartbeat threads too), before its
    phone stops (so this fixture asks for the phone first)."""
    if "phone" in request.fixturenames:
        request.getfixturevalue("phone")
    yield
    while _OPENED:
        try:
            _OPENED.pop().close()
        except Exception:  # noqa: BLE001 -- a device the test killed on purpose
            pass


def device_of(tmp_path: Path, serial: str, hil_session, **overrides):
    session = HilSession(options(tmp_path, serial, runner=hil_session.options.runner, **overrides))
    _OPENED.append(session)
    return session, session.device


def script_runner(device, tmp_path: Path, text: str, name: str = "runner.sh") -> None:
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + text)
    device.runner_path = device.workspace / name
    device.push_files({script: device.runner_path}, mode=0o755)


def simple(model, name: str) -> Scenario:
    return Scenario(name).load_module("A", model).execute("A", "forward").destroy_module("A")


STARTED = "touch ../../runner-started\n"  # a script runner's mark, after its step 0


def once_started(phone, device, action) -> threading.Thread:
    """`action` on a thread once a script runner has printed step 0 (its STARTED mark in the
    workspace), not after a fixed delay: the push and the shell come first on a busy host."""
    mark = phone.sandbox / str(device.workspace).lstrip("/") / "runner-started"

    def wait_then_act() -> None:
        end = time.monotonic() + 120
        while not mark.exists() and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.3)  # for the step-0 line already in the pipe to reach the host
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_a_dropped_device_is_waited_for_the_whole_window(phone, tmp_path, compiled_model,
                                                         hil_session):
    """adb says "Connection refused" at once; that must not end the wait early."""
    _session, device = device_of(tmp_path, phone.serial, hil_session, reacquire_s=8)
    script_runner(device, tmp_path, STEP0 + STARTED + "exec sleep 300\n")
    stopped: list[float] = []
    thread = once_started(phone, device, lambda: (phone.stop(), stopped.append(time.monotonic())))
    with pytest.raises(DeviceError) as exc:
        device.run(simple(compiled_model("linear_relu"), "gone"), tmp_path / "a", 120)
    thread.join()
    waited = time.monotonic() - stopped[0]
    text = str(exc.value)
    assert 7.9 <= waited < 30, f"waited {waited:.1f} s for an 8 s window"
    assert "did not come back within the 8 s re-acquire window" in text
    assert float(re.search(r"is not online after waiting (\d+\.\d) s", text)[1]) >= 7.9
    assert "Connection refused" in text  # what adb said, in the failure
    attempts = int(re.search(r"(\d+) `adb connect` attempt", text)[1])
    assert attempts >= 5, f"adb connect was not retried through the window: {text}"
    # Every later test fails at once with the same reason: the session never hangs.
    started = time.monotonic()
    with pytest.raises(DeviceError, match="did not come back"):
        device.run(simple(compiled_model("linear_relu"), "gone2"), tmp_path / "b", 120)
    assert time.monotonic() - started < 1


def test_a_device_back_within_the_window_is_reacquired_and_the_session_goes_on(
        phone, tmp_path, compiled_model, hil_session):
    """Unplugged mid-run and back 3 s later on the same port: this run fails, keeping what it
    streamed and naming the step it was in; the runner it left is killed; the next run passes."""
    session, device = device_of(tmp_path, phone.serial, hil_session, reacquire_s=8)
    model = compiled_model("linear_relu")
    script_runner(device, tmp_path,
                  STEP0 + "echo streamed-before-the-drop\n" + STARTED + "exec sleep 300\n")

    def unplug_and_replug() -> None:
        phone.stop()
        time.sleep(3)
        phone.start()

    thread = once_started(phone, device, unplug_and_replug)
    with pytest.raises(RunInterrupted) as exc:
        device.run(simple(model, "replug"), tmp_path / "a", 120)
    thread.join()
    text = str(exc.value)
    assert "went offline during scenario replug" in text and "it is back, the session goes on" in text
    assert "interrupted during step 1 execute(A.forward) (last completed: step 0 load_module(A))" in text
    assert exc.value.step.startswith("step 1 execute(A.forward)")
    assert "streamed-before-the-drop" in exc.value.output.stdout
    assert '"index": 0' in exc.value.output.stdout
    assert "streamed-before-the-drop" in (tmp_path / "a" / "runner.stdout").read_text()
    # The runner the drop left behind was killed when the device came back, and said so.
    assert any("killed 1 runner(s) left running" in n for n in session.notices), session.notices
    assert not device.lost
    # The session goes on: the same device, with the real runner, passes the next test.
    assert session.device is device
    device.runner_path = device.workspace / RUNNER_NAME
    result = ScenarioDriver(device, tmp_path / "b", 300).run(
        simple(model, "after"))
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]


def test_an_interrupted_stream_on_a_live_device_keeps_the_output_and_kills_the_runner(
        phone, tmp_path, compiled_model, hil_session):
    """The adb server drops the stream (here: its transport is disconnected and connected
    again at once) while the device stays: the failure names the step, the runner is killed."""
    _session, device = device_of(tmp_path, phone.serial, hil_session, reacquire_s=8)
    script_runner(device, tmp_path,
                  STEP0 + "echo $$ > ../../runner-pid.txt\n" + STARTED + "exec sleep 300\n")

    def cut() -> None:
        subprocess.run(["adb", "disconnect", phone.serial], capture_output=True)
        subprocess.run(["adb", "connect", phone.serial], capture_output=True)

    thread = once_started(phone, device, cut)
    with pytest.raises(RunInterrupted) as exc:
        device.run(simple(compiled_model("linear_relu"), "cut"), tmp_path / "a", 120)
    thread.join()
    assert exc.value.step.startswith("step 1 execute(A.forward)")
    assert '"index": 0' in exc.value.output.stdout
    pid = int((phone.sandbox / str(device.workspace).lstrip("/") / "runner-pid.txt").read_text())
    assert wait_gone(pid), "the interrupted runner still runs"


def test_an_interrupted_run_whose_pid_never_reached_the_host_is_killed(phone, tmp_path,
                                                                       hil_session):
    """A stream cut before the runner's pid reached the host (or before the shell wrote the
    pid file): the run's processes are found by their working directory, the run directory,
    and killed; a process elsewhere in the workspace is left alone."""
    _session, device = device_of(tmp_path, phone.serial, hil_session)
    run_dir = device.workspace / "runs" / "0123456789abcdef-cut"
    other = device.workspace / "runs" / "fedcba9876543210-other"
    pids = []
    for directory in (run_dir, other):
        code, out = device.sh(f"mkdir -p {shlex.quote(str(directory))} && cd "
                              f"{shlex.quote(str(directory))} && {{ setsid sleep 300 "
                              "</dev/null >/dev/null 2>&1 & echo $!; }")
        assert code == 0, out
        pids.append(int(out.split()[-1]))
    try:
        device._kill_run("", run_dir)
        assert wait_gone(pids[0]), "the run's process still runs"
        assert running(pids[1]), "a process of another run directory was killed"
    finally:
        for pid in pids:
            kill_group(pid)


CRASH = STEP0 + ('echo "F libc    : Fatal signal 11 (SIGSEGV) in tid $$ (runner)" '
                 '>> "$ANDROID_DATA/../logcat.txt"\n'
                 '__TOMBSTONE__kill -SEGV $$\n')
NEW_TOMBSTONE = ("printf '*** *** ***\\nsignal 11 (SIGSEGV), this run\\n' "
                 "> \"$ANDROID_DATA/tombstones/tombstone_01\"\n")


def test_only_tombstones_of_the_runs_own_time_window_are_attached(phone, tmp_path,
                                                                  compiled_model, hil_session):
    _session, device = device_of(tmp_path, phone.serial, hil_session)
    stale = phone.sandbox / "data" / "tombstones" / "tombstone_00"
    stale.write_text("*** *** ***\nsignal 6 (SIGABRT), a crash from yesterday\n")
    old = time.time() - 86400
    os.utime(stale, (old, old))
    model = compiled_model("linear_relu")
    # A crash that leaves no tombstone: the stale one is not its tombstone.
    script_runner(device, tmp_path, CRASH.replace("__TOMBSTONE__", ""))
    out = device.run(simple(model, "crash1"), tmp_path / "a", 60)
    assert out.returncode == -11
    assert "Fatal signal 11" in out.logs["logcat"]
    assert not any("from yesterday" in text for text in out.logs.values()), out.logs.keys()
    assert "tombstone" not in out.logs
    # A crash that writes one: that one, and only that one, is attached.
    script_runner(device, tmp_path, CRASH.replace("__TOMBSTONE__", NEW_TOMBSTONE))
    out = device.run(simple(model, "crash2"), tmp_path / "b", 60)
    assert "this run" in out.logs["tombstone"]
    assert not any("from yesterday" in text for text in out.logs.values())


def test_a_timeout_kills_the_runners_whole_process_group(phone, tmp_path, compiled_model,
                                                         hil_session):
    """The runner forks a child that a plain `kill <pid>` would leave running (and that the
    loopback's own clean-up cannot reach: the runner has its own process group)."""
    _session, device = device_of(tmp_path, phone.serial, hil_session)
    script_runner(device, tmp_path, STEP0 + (
        "sleep 300 &\n"
        "echo $! > child.pid\n"
        "cut -d' ' -f5 /proc/$$/stat > pgid\n"  # the process group (field 5 of stat)
        "cut -d' ' -f5 /proc/$PPID/stat > shell-pgid\n"
        "exec sleep 301\n"))
    out = device.run(simple(compiled_model("linear_relu"), "hang"), tmp_path / "a", 6)
    assert out.timed_out and out.returncode is None
    pid = int(next(l.split()[1] for l in out.stdout.splitlines() if l.startswith("HARNESS_PID")))
    run_dir = next((phone.sandbox / str(device.workspace).lstrip("/") / "runs").glob("*-hang"))
    child = int((run_dir / "child.pid").read_text())
    try:
        assert int((run_dir / "pgid").read_text()) == pid  # the runner leads its own group
        assert int((run_dir / "shell-pgid").read_text()) != pid  # not the adb shell's group
        assert wait_gone(pid), "the hung runner still runs"
        assert wait_gone(child), "the runner's child outlived the timeout kill"
        assert not (run_dir / "runner.pid").exists()
    finally:
        kill_group(pid)
        kill_group(child)


def test_a_timeout_kills_what_left_the_runners_process_group(phone, tmp_path, compiled_model,
                                                            hil_session):
    """A child that left the runner's group and session (`setsid`) is out of reach of the group
    kill; the timeout kills every process whose working directory is the run's directory."""
    _session, device = device_of(tmp_path, phone.serial, hil_session)
    script_runner(device, tmp_path, STEP0 + (
        "setsid sleep 300 &\n"
        "echo $! > escaped.pid\n"
        "exec sleep 301\n"))
    out = device.run(simple(compiled_model("linear_relu"), "escape"), tmp_path / "a", 6)
    assert out.timed_out and out.returncode is None
    run_dir = next((phone.sandbox / str(device.workspace).lstrip("/") / "runs").glob("*-escape"))
    escaped = int((run_dir / "escaped.pid").read_text())
    try:
        assert wait_gone(escaped), "a process that left the runner's group outlived the timeout"
    finally:
        kill_group(escaped)


def test_a_session_in_a_kept_workspace_kills_runners_left_there(phone, tmp_path, compiled_model,
                                                                hil_session):
    workspace = "/data/local/tmp/kept-ws"
    _session, device = device_of(tmp_path, phone.serial, hil_session, device_workspace=workspace,
                                keep_workspace=True)
    script_runner(device, tmp_path, "sleep 300 &\nexec sleep 302\n")
    # An earlier session that died mid-run: its runner was started and its stream dropped.
    run_dir = device.workspace / "runs" / "0123456789abcdef-left"
    device.sh(f"mkdir -p {shlex.quote(str(run_dir))}")
    conn = device.adb.client.device(device.serial).shell(device._run_command(run_dir), stream=True,
                                                         timeout=None)
    text = b""
    while b"HARNESS_PID" not in text:
        text += conn.conn.recv(4096)
    conn.close()
    pid = int(text.decode().split("HARNESS_PID ")[1].split()[0])
    time.sleep(0.3)
    assert running(pid), "the left runner should outlive its dropped stream"
    # An unrelated process with a stale pid file of ours is left alone.
    decoy = subprocess.Popen(["sleep", "300"])
    other = phone.sandbox / str(device.workspace).lstrip("/") / "runs" / "fedcba9876543210-other"
    other.mkdir(parents=True)
    (other / "runner.pid").write_text(f"{decoy.pid}\n")
    try:
        device.device_lease.release()  # the session dies: no close, its runner lives on
        session2, again = device_of(tmp_path, phone.serial, hil_session,
                                    device_workspace=workspace, keep_workspace=True)
        assert wait_gone(pid), "the runner left in the kept workspace still runs"
        notes = [n for n in session2.notices if "left running in workspace" in n]
        assert notes and f"pid {pid}" in notes[0] and workspace in notes[0], session2.notices
        assert decoy.poll() is None, "a process that is not our runner was killed"
        assert not (other / "runner.pid").exists()
        again.close()
    finally:
        decoy.kill()
        decoy.wait()


def test_a_flooding_runner_is_cut_to_the_output_limit(phone, tmp_path, compiled_model,
                                                      hil_session, monkeypatch):
    """40 MB on each of stdout and stderr, and no end: the host keeps the head and tail of
    each within the limit (1 MB here), the trace still comes back, and the verdict says so."""
    monkeypatch.setenv("EXECUTORCH_HIL_OUTPUT_LIMIT_MB", "1")
    _session, device = device_of(tmp_path, phone.serial, hil_session)
    script_runner(device, tmp_path, STEP0 + (
        "echo 'trace line' > \"$HARNESS_QNN_TRACE\"\n"
        "head -c 40000000 /dev/zero | tr '\\0' o\n"
        "head -c 40000000 /dev/zero | tr '\\0' e >&2\n"
        "exit 1\n"))
    out = device.run(simple(compiled_model("linear_relu"), "flood"), tmp_path / "a", 120)
    assert out.returncode == 1
    assert len(out.stdout) < 1.1e6 and len(out.stderr) < 1.1e6, (len(out.stdout), len(out.stderr))
    assert out.stdout.startswith(STEP0.split("'")[1]) or '"index": 0' in out.stdout[:2000]
    assert out.trace_text.strip() == "trace line"
    assert [n.split(" bytes to ")[1].split(";")[0] for n in out.notes
            if "output limit reached" in n] == ["stdout", "stderr"], out.notes
    assert "the runner wrote 40000000 bytes to stderr" in " ".join(out.notes)
