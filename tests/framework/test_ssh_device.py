"""The ssh device kind against a real OpenSSH server: Debian's sshd on 127.0.0.1 with a sandbox
user (`sshd_board.SshdBoard`), the harness's OpenSSH client, its ControlMaster, tar pushes and
the host's runner on the board's side. Skipped only when sshd cannot be started here.

Hang and crash cases push a small shell script as the runner, so everything around it (push,
launch, process group, pid file, kill, exit signal, evidence) is the code boards get.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from harness.devices.kinds import kind_for
from harness.devices.ssh import SshKind
from harness.devices.ssh.board import open_board
from harness.devices.ssh.target import parse_target
from harness.drive.driver import ScenarioDriver
from harness.errors import ConfigError, DeviceError
from harness.qnn.sdk import discover
from harness.scenario import Scenario
from harness.config.options import Options

from sshd_board import BoardUnavailable, SshdBoard


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    try:
        sshd = SshdBoard(tmp_path_factory.mktemp("sshd")).start()
    except BoardUnavailable as exc:
        pytest.skip(f"no sshd board here: {exc}")
    yield sshd
    sshd.stop()


def options(tmp_path: Path, **changes) -> Options:
    base = Options(devices=[], simulator=False, soc=None, device_config=None,
                   artifacts_dir=tmp_path / "artifacts", keep_artifacts=False, runner="auto",
                   runner_timeout=None, abi_bridge="auto", keep_workspace=False, device_workspace=None, worker="master",
                   worker_count=1, reacquire_s=20.0)
    return dataclasses.replace(base, **changes)


def open_(board, tmp_path, target=None, **changes):
    notices: list[str] = []
    device = open_board(target or board.target, options(tmp_path, **changes),
                        notice=notices.append, sdk=discover, ssh_config=board.client_config,
                        lease_dir=board.lease_dir)
    device.notices = notices
    return device


@pytest.fixture
def device(board, tmp_path):
    dev = open_(board, tmp_path)
    yield dev
    dev.close()


def simple(model, name="ssh") -> Scenario:
    return Scenario(name).load_module("A", model).execute("A", "forward").destroy_module("A")


def script_runner(device, tmp_path, text) -> None:
    script = tmp_path / "runner.sh"
    script.write_text(text)
    device.runner_path = device.workspace / "runner.sh"
    device.push_files({script: device.runner_path}, mode=0o755)


# The registry and the target forms ------------------------------------------------------------

def test_targets_are_claimed_and_bad_ones_refused():
    assert kind_for("ssh://board") is SshKind and kind_for("ssh://u@h:22").name == "ssh"
    assert parse_target("ssh://u@[::1]:2222").ssh_host == "::1"
    assert parse_target("ssh://alias").ssh_args() == []
    for bad in ("ssh://", "ssh://-oProxyCommand=x", "ssh://h:0", "ssh://h:port", "ssh://a b",
                "ssh://h;rm", "ssh://-l@h"):
        with pytest.raises(ConfigError):
            parse_target(bad)


def test_unreachable_host_is_one_clear_device_error(board, tmp_path):
    free = board.port + 1 if board.port < 65535 else board.port - 1
    started = time.monotonic()
    with pytest.raises(DeviceError, match=r"ssh could not connect|no ssh connection"):
        open_(board, tmp_path, target=f"ssh://{board.user}@127.0.0.1:{free}", connect_s=3)
    assert time.monotonic() - started < 30


# Pushes, workspace ----------------------------------------------------------------------------

def test_second_session_skips_every_push_and_the_alias_form_works(board, tmp_path):
    first = open_(board, tmp_path, keep_workspace=True)
    workspace = str(first.workspace)
    pushed = first.stats.pushed
    first.close()
    assert pushed > 3 and first.stats.skipped == 0
    second = open_(board, tmp_path, target=board.alias_target, keep_workspace=False,
                   device_workspace=workspace)
    try:
        assert second.stats.pushed == 0 and second.stats.skipped == pushed
        assert second.info.kind == "ssh" and second.info.abi == "x86_64"
        assert second.replay_args() == ["--device", board.alias_target]
    finally:
        second.close()


def test_workspace_rules_never_delete_a_users_files(board, tmp_path, device):
    root = device.root
    mine = root / "users-own"
    device.sh(f"mkdir -p {mine} && echo precious > {mine}/notes.txt")
    with pytest.raises(DeviceError, match="already holds files the harness did not create"):
        open_(board, tmp_path, device_workspace=str(mine))
    assert device.sh(f"cat {mine}/notes.txt")[1].strip() == "precious"
    for outside in ("/tmp/x", "/home", str(root), f"{root}/../x"):
        with pytest.raises(ConfigError):
            open_(board, tmp_path, device_workspace=outside)
    # An adopted empty directory: the harness removes its own entries, never the directory.
    empty = root / "adopted"
    device.sh(f"mkdir -p {empty}")
    adopted = open_(board, tmp_path, device_workspace=str(empty))
    adopted.sh(f"echo mine > {empty}/user-file")
    adopted.close()
    _, out = device.sh(f"ls -A {empty}")
    assert out.split() == ["user-file"], out
    device.sh(f"rm -rf {mine} {empty}")


def test_a_nested_workspace_removes_the_parents_it_created_and_no_others(board, tmp_path,
                                                                          device):
    """A workspace `<root>/users-dir/a/b/ws` where only users-dir existed: a and b go with it,
    users-dir (the user's) stays."""
    users = device.root / "users-parent"
    device.sh(f"mkdir -p {users} && echo precious > {users}/notes.txt")
    nested = open_(board, tmp_path, device_workspace=str(users / "a" / "b" / "ws"))
    _, marker = device.sh(f"grep -e ^created= -e ^parents= {users}/a/b/ws/.executorch-hil-workspace")
    assert marker.split() == ["created=1", "parents=2"], marker
    nested.close()
    _, out = device.sh(f"ls -A {users}")
    assert out.split() == ["notes.txt"], out
    device.sh(f"rm -rf {users}")


def test_a_killed_sessions_workspace_on_a_board_is_reclaimed(board, tmp_path, device):
    """A workspace whose owner (a process of this host) no longer runs is removed when the
    next session takes the board, with a notice; a live owner's stays."""
    import os
    import socket

    from harness.devices import lease

    def marker(pid: int) -> str:
        fields = {"created": "1", "token": f"t-{pid}", "host": lease.clean(socket.gethostname()),
                  "hostboot": lease.clean(lease.host_boot_id()), "pid": str(pid),
                  "pidstart": lease.pid_start(pid) or "-", "session": f"s{pid}", "worker": "gw0",
                  "entry": "executorch_hil_runner"}
        return "\\n".join(f"{k}={v}" for k, v in fields.items())

    dead, live = device.root / "ws-dead0001-gw0", device.root / "ws-live0001-gw0"
    for path, pid in ((dead, 4194999), (live, os.getpid())):
        device.sh(f"mkdir -p {path}/runs && echo x > {path}/executorch_hil_runner && "
                  f"printf '{marker(pid)}\\n' > {path}/.executorch-hil-workspace")
    again = open_(board, tmp_path)
    try:
        notes = [n for n in again.notices if "reclaimed workspace" in n]
        assert len(notes) == 1 and str(dead) in notes[0] and "no longer runs" in notes[0], \
            again.notices
        assert device.sh(f"test -e {dead}")[0] != 0
        assert device.sh(f"test -f {live}/.executorch-hil-workspace")[0] == 0
    finally:
        again.close()
        device.sh(f"rm -rf {live}")


# Runs -----------------------------------------------------------------------------------------

def test_scenarios_run_as_forks_over_the_session_connection(device, compiled_model, tmp_path):
    result = ScenarioDriver(device, tmp_path / "a", 120).run(simple(compiled_model("linear_relu")))
    assert result.output.returncode == 0, result.output.stderr[-2000:]
    assert device.runs["fork"] == 1
    before = device.stats.pushed
    ScenarioDriver(device, tmp_path / "b", 120).run(simple(compiled_model("linear_relu")))
    assert device.stats.pushed == before  # the .pte and tensors were pushed once


SLEEPER = ("#!/bin/sh\necho 'HARNESS_EVENT {\"event\": \"start\"}'\nsleep 300 &\n"
           "echo child $! > child.pid\nwait\n")
CRASHER = """#!/bin/sh
echo 'HARNESS_EVENT {"event": "step", "index": 0, "op": "load_module", "status": "ok", "trace_offset": 0}'
kill -SEGV $$
"""


def test_timeout_kills_the_runners_whole_group(device, compiled_model, tmp_path):
    script_runner(device, tmp_path, SLEEPER)
    out = device.run(simple(compiled_model("linear_relu"), "hang"), tmp_path / "a", 3)
    assert out.timed_out and out.returncode is None
    _, text = device.sh(f"cat {device.workspace}/runs/*-hang/child.pid")
    child = text.split()[1]
    end = time.monotonic() + 20
    while time.monotonic() < end:
        _, stat = device.sh(f"cat /proc/{child}/stat 2>/dev/null")
        if not stat.strip() or stat.split(") ")[1][0] == "Z":
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the runner's child {child} still runs")


def test_crash_gives_its_signal_and_evidence(device, compiled_model, tmp_path):
    script_runner(device, tmp_path, CRASHER)
    out = device.run(simple(compiled_model("linear_relu"), "crash"), tmp_path / "a", 60)
    assert out.returncode == -11
    evidence = out.logs["evidence"]
    assert evidence.startswith("collected: ") and "unavailable: " in evidence
    # each source is either collected or named unavailable with its reason
    for source in ("journalctl", "dmesg", "core"):
        assert source in out.logs or f"{source}:" in evidence, evidence


# Dropped connections --------------------------------------------------------------------------

def test_a_killed_control_master_is_reacquired(device, compiled_model, tmp_path):
    device.transport.master.kill()
    device.transport.master.wait()
    with pytest.raises(DeviceError, match="it is back, the session goes on"):
        device.sh("true")
    assert device.transport.check() and not device.lost
    result = ScenarioDriver(device, tmp_path / "a", 120).run(simple(compiled_model("linear_relu")))
    assert result.output.returncode == 0
    assert any("re-established" in n for n in device.notices)


def test_a_board_that_stays_away_fails_later_calls_at_once(tmp_path, compiled_model):
    try:
        sshd = SshdBoard(tmp_path / "sshd").start()
    except BoardUnavailable as exc:
        pytest.skip(f"no sshd board here: {exc}")
    try:
        dev = open_(sshd, tmp_path, reacquire_s=3)
        sshd.stop()  # sshd and its sessions: the master's connection goes with them
        end = time.monotonic() + 10
        while dev.transport.check() and time.monotonic() < end:
            time.sleep(0.1)
        with pytest.raises(DeviceError, match="did not answer again within the 3 s"):
            dev.sh("true")
        started = time.monotonic()
        with pytest.raises(DeviceError, match="re-acquire window"):
            dev.run(simple(compiled_model("linear_relu")), tmp_path / "a", 60)
        assert time.monotonic() - started < 1
        dev.close()
    finally:
        sshd.stop()


def test_the_fix_model_rides_with_the_runner_to_the_board(board, tmp_path, compiled_model,
                                                           monkeypatch):
    """--runtime-variant on an x86_64 board: the wrapper is pushed and preloaded, and S1's
    survivor executes on the fix model (a manager per Module) as on the simulator."""
    from harness.runtime.variants import ENV
    from harness.scenario.library import s1_two_modules

    monkeypatch.setenv(ENV, "fix-model")
    dev = open_(board, tmp_path)
    try:
        result = ScenarioDriver(dev, tmp_path / "a", 120).run(
            s1_two_modules(compiled_model("linear_relu")))
    finally:
        dev.close()
    assert "[harness registry wrapper] runtime variant fix-model" in result.output.stderr
    assert all(s.ok for s in result.steps), [(s.status, s.message) for s in result.steps]


def test_a_dlopen_sweep_point_gives_the_simulators_verdict(device, compiled_model,
                                                           scenario_driver, tmp_path):
    """The board's runner preloads the dlopen shim as the simulator's does: the sweep's point
    `dlopen.libQnnHtp.so` is traced on the board, failing it is the runtime's own failed open
    there too, and the verdict (the calls, each step's status, what the judge finds) is the
    simulator's."""
    from sweep_parity import sweep_point

    model = compiled_model("linear_relu")
    on_board = sweep_point(ScenarioDriver(device, tmp_path / "board", 120), model,
                           "dlopen.libQnnHtp.so")
    assert "libharness_qnn_dlopen.so" in device.run_env["LD_PRELOAD"]
    assert on_board.injected and on_board.failures == (), on_board
    assert on_board == sweep_point(scenario_driver, model, "dlopen.libQnnHtp.so")


def test_a_launch_cause_runs_on_a_board_that_has_the_tool(device, compiled_model, tmp_path):
    """A scenario recorded under libfiu's fiu-run (harness.runner.launch) runs under the
    board's own fiu-run (this host's, the board being a local sshd): the XNNPACK cache's
    ftruncate(0) fails with EIO there as on the simulator. Without it the file is written."""
    import shutil

    from harness.drive.xnnpack_cache import MODEL, PRECISION, new_cache
    from harness.results.xnnpack_log import failures
    from harness.runner.launch import fiu_run

    if shutil.which("fiu-run") is None:
        pytest.skip("libfiu is not installed (Debian fiu-utils)")
    xnn = new_cache(device, ScenarioDriver(device, tmp_path / "a", 120),
                    compiled_model(MODEL, PRECISION), "board-fiu")
    fault = fiu_run("enable name=posix/io/rw/ftruncate,failinfo=5,onetime=1")
    result = xnn.launch("ftruncate0", xnn.path("stack.xnncache"), under=(fault,))
    assert failures(result.output.stderr.splitlines()) == ["truncate0_failed 5 (EIO)"], \
        result.output.stderr[-2000:]
    plain = xnn.launch("plain", xnn.path("plain.xnncache"))
    assert failures(plain.output.stderr.splitlines()) == [], plain.output.stderr[-2000:]
