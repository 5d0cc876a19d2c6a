"""The adb device path end to end: the real adb server and adbutils against a loopback device
(a Python adbd on 127.0.0.1 that runs what is pushed on the host's HTP simulator).

Crash and hang cases push a small shell script as the runner, so everything around the runner
(push, launch, streaming, pid kill, exit signal, logcat and tombstone collection) is the code
users run against phones.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.cache import cache_root
from harness.drive.driver import ScenarioDriver
from harness.errors import ConfigError, DeviceError
from harness.loopback import LoopbackDevice, connect, disconnect, start_server
from harness.qnn.sdk import discover
from harness.scenario import Scenario
from harness.scenario.library import s1_two_modules
from harness.session import HilSession

from adb_options import adb_options
from dsp_emulation import build_emulation

pytest_plugins = ["pytester"]
CACHE = cache_root()  # read now: pytester points HOME at a temporary directory
pytestmark = pytest.mark.skipif(shutil.which("adb") is None,
                                reason="the adb client/server (Debian package adb) is not installed")


options = adb_options


@pytest.fixture(scope="module")
def sdk():
    return discover()


@pytest.fixture(scope="module")
def phone(tmp_path_factory, sdk):
    """A loopback SM8650 'phone' attached to the real adb server."""
    start_server()
    dev = LoopbackDevice(tmp_path_factory.mktemp("phone"), extra_env=sdk.device_environment()).start()
    connect(dev.serial)
    yield dev
    disconnect(dev.serial, missing_ok=True)
    dev.stop()


@pytest.fixture
def session(phone, tmp_path, hil_session):
    return HilSession(options(tmp_path, phone.serial, runner=hil_session.options.runner))


@pytest.fixture
def adb_device(session, phone):
    device = session.device
    yield device
    device.close()


def simple(model, name="adb") -> Scenario:
    return Scenario(name).load_module("A", model).execute("A", "forward").destroy_module("A")


def test_identify_and_preflight(adb_device, phone, session):
    assert adb_device.info.soc == "SM8650" and adb_device.info.abi == "x86_64"
    assert adb_device.preflight() == []
    report = adb_device.preflight_report
    assert all(v["matches_sdk"] for v in report["qnn_libraries"].values())
    assert report["mem_available_kb"] > 0
    assert (session.options.artifacts_dir / f"preflight-{phone.serial.replace(':', '_')}.json").exists()
    workspace = phone.sandbox / str(adb_device.workspace).lstrip("/")
    assert (workspace / "libQnnHtp.so").exists()


def test_preflight_fails_on_a_tampered_library(adb_device, phone):
    remote = phone.sandbox / str(adb_device.workspace).lstrip("/") / "libQnnSystem.so"
    remote.write_bytes(b"not the SDK's library")
    problems = adb_device.preflight()
    assert any("libQnnSystem.so on the device does not match" in p for p in problems)


def test_runs_scenario_and_dedupes_pushes(adb_device, compiled_model, tmp_path, session, phone):
    model = compiled_model("linear_relu")
    driver = ScenarioDriver(adb_device, tmp_path / "a", 300)
    first = driver.run(simple(model, "first"))
    assert [s.status for s in first.steps] == ["ok", "ok", "ok"]
    assert first.steps[1].live["context"] == 1  # the QNN trace came back from the device
    assert first.output.pushes["pushed"] >= 4  # pte, input, expected output, scenario
    second = driver.run(simple(model, "second"))
    assert second.output.pushes["pushed"] == 1  # only the new scenario file
    assert second.output.pushes["skipped"] >= 3
    # A new session on the same workspace finds every file on the device already.
    again = HilSession(options(
        tmp_path, phone.serial, runner=session.options.runner,
        device_workspace=str(adb_device.workspace), keep_workspace=True)).device
    assert again.stats.pushed == 0 and again.stats.skipped >= 2
    third = ScenarioDriver(again, tmp_path / "b", 300).run(simple(model, "third"))
    assert third.output.pushes["pushed"] == 0 or third.output.pushes["pushed"] == 1
    assert all(s.ok for s in third.steps)


def test_a_scenario_whose_files_are_there_costs_one_adb_call(adb_device, compiled_model,
                                                             tmp_path, session):
    """A process per scenario (--scenario-isolation process): one shell call runs it: run
    directory, scenario file on stdin, runner, then its stderr and QNN trace after markers (no
    `cat` round trips); a model's first use adds one sha256 check and one sync session. (The
    fork path's one request per scenario: test_adb_fork.py.)"""
    adb_device.isolation = "process"
    model = compiled_model("linear_relu")
    driver = ScenarioDriver(adb_device, tmp_path / "a", 300)
    calls: list[str] = []
    real = adb_device.adb.client.make_connection
    main = threading.current_thread()

    def counted(*args, **kwargs):
        if threading.current_thread() is main:  # not the lease's heartbeat thread
            calls.append("connection")
        return real(*args, **kwargs)

    adb_device.adb.client.make_connection = counted
    try:
        first = driver.run(simple(model, "first-use"))
        first_calls = len(calls)
        calls.clear()
        result = driver.run(simple(model, "files-there"))
    finally:
        del adb_device.adb.client.make_connection
    assert first_calls == 3 and first.output.pushes["pushed"] >= 4, (first_calls,
                                                                     first.output.pushes)
    assert len(calls) == 1
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]
    assert result.output.stdout.rstrip().splitlines()[-1] == "HARNESS_EXIT 0"
    assert "HARNESS_STDERR" not in result.output.stdout
    assert "HARNESS_SCENARIO" not in result.output.stdout
    assert result.output.stderr.strip() and "HARNESS_" not in result.output.stderr.replace(
        "HARNESS_STEP", "")
    assert result.steps[1].live["context"] == 1  # the trace came back in that one call
    assert result.output.pushes["pushed"] == 1  # the scenario file, through the run's stdin


def test_hostile_file_names_are_quoted(adb_device, compiled_model, tmp_path, session, phone):
    model = compiled_model("linear_relu")
    hostile = tmp_path / "it's a \"model\"; touch pwned $(id) `id`"
    hostile.mkdir()
    pte = hostile / "m o'd\"el;rm -rf x.pte"
    shutil.copy(model.pte, pte)
    result = ScenarioDriver(adb_device, tmp_path / "a", 300).run(
        simple(dataclasses.replace(model, pte=pte), "hostile"))
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]
    assert not list(phone.sandbox.rglob("pwned")) and not list(Path("/").glob("pwned"))


SLEEPER = "#!/bin/sh\necho HARNESS_EVENT '{\"event\": \"start\"}'\nexec sleep 300\n"
CRASHER = """#!/bin/sh
echo 'HARNESS_EVENT {"event": "step", "index": 0, "op": "load_module", "status": "ok", "trace_offset": 0}'
echo "F libc    : Fatal signal 11 (SIGSEGV), code 1 in tid $$ (runner)" >> "$ANDROID_DATA/../logcat.txt"
printf '*** *** ***\\nsignal 11 (SIGSEGV), fault addr 0x0\\n' > "$ANDROID_DATA/tombstones/tombstone_07"
kill -SEGV $$
"""


def script_runner(adb_device, tmp_path, text) -> None:
    script = tmp_path / "runner.sh"
    script.write_text(text)
    adb_device.runner_path = adb_device.workspace / "runner.sh"
    adb_device.push_files({script: adb_device.runner_path}, mode=0o755)


def test_hung_runner_is_killed_by_pid(adb_device, compiled_model, tmp_path):
    script_runner(adb_device, tmp_path, SLEEPER)
    out = adb_device.run(simple(compiled_model("linear_relu"), "hang"), tmp_path / "a", 3)
    assert out.timed_out and out.returncode is None
    pid = next(l.split()[1] for l in out.stdout.splitlines() if l.startswith("HARNESS_PID"))
    stat = "?"
    end = time.monotonic() + 30
    while stat and time.monotonic() < end:
        _, stat = adb_device.sh(f"cat /proc/{pid}/stat 2>/dev/null")
        # gone, or a zombie waiting for a reaper: either way it no longer runs
        stat = "" if not stat.strip() or stat.split(") ")[1][0] == "Z" else stat
        time.sleep(0.1)
    assert not stat, f"the hung runner still runs: {stat}"


def test_crash_collects_signal_logcat_and_tombstone(adb_device, compiled_model, tmp_path):
    script_runner(adb_device, tmp_path, CRASHER)
    driver = ScenarioDriver(adb_device, tmp_path / "a", 60)
    result = driver.run(simple(compiled_model("linear_relu"), "crash"), allow_crash=True)
    assert result.output.returncode == -11
    assert "Fatal signal 11" in result.output.logs["logcat"]
    assert "signal 11 (SIGSEGV)" in result.output.logs["tombstone"]
    report = result.crash_report()
    assert "signal SIGSEGV" in report and "last completed step: load_module(A)" in report
    assert (result.artifacts / "tombstone.txt").exists()


def test_unknown_soc_is_a_clear_error(tmp_path, sdk):
    with LoopbackDevice(tmp_path / "s", properties={"ro.soc.model": "SM1234"},
                        extra_env=sdk.device_environment()) as dev:
        connect(dev.serial)
        try:
            with pytest.raises(ConfigError) as exc:
                _ = HilSession(options(tmp_path, dev.serial)).device
        finally:
            disconnect(dev.serial, missing_ok=True)
    assert "SoC SM1234 has no config" in str(exc.value)
    assert "SM8550, SM8650, SM8750" in str(exc.value)


def test_offline_device_is_a_clear_error(tmp_path):
    started = time.monotonic()
    with pytest.raises(DeviceError, match="is not online after waiting") as exc:
        _ = HilSession(options(tmp_path, "127.0.0.1:1", connect_s=2)).device
    assert time.monotonic() - started >= 2  # the whole window, though adb said "refused" at once
    assert "Connection refused" in str(exc.value)


def test_a_failed_adb_call_is_one_adb_error_saying_what_failed():
    """Every adb call goes through the device's AdbProxy: one the adb server refuses (a serial
    it does not know) is an AdbError with the command, adb's words and what to check, and a
    serial with shell metacharacters stays one quoted word in the advice."""
    from harness.devices.adb.transport import AdbError, AdbProxy, adb_client

    start_server()
    adb = AdbProxy(adb_client(), "no-such;serial")
    with pytest.raises(AdbError) as exc:
        adb.shell("echo 'a b'")
    err = exc.value
    assert isinstance(err, DeviceError)
    assert (err.cmd, err.returncode, err.serial) == ("shell echo 'a b'", None, "no-such;serial")
    assert "not found" in err.stderr, err.stderr
    text = str(err)
    assert text.startswith("no-such;serial: adb `shell echo 'a b'` failed: "), text
    assert "`adb -s 'no-such;serial' get-state` answers `device`" in text, text
    during = err.while_("starting the runner")
    assert str(during).startswith("no-such;serial: starting the runner: adb `shell echo"), during
    assert not adb.online()


def test_device_disappearing_mid_test_fails_fast(tmp_path, sdk, compiled_model, hil_session):
    dev = LoopbackDevice(tmp_path / "s", extra_env=sdk.device_environment()).start()
    connect(dev.serial)
    try:
        device = HilSession(options(tmp_path, dev.serial, runner=hil_session.options.runner,
                                    reacquire_s=2)).device
        script_runner(device, tmp_path, SLEEPER)
        threading.Timer(1.5, dev.stop).start()
        started = time.monotonic()
        with pytest.raises(DeviceError, match="went offline"):
            device.run(simple(compiled_model("linear_relu"), "gone"), tmp_path / "a", 120)
        assert time.monotonic() - started < 30
        with pytest.raises(DeviceError, match="did not come back"):
            device.run(simple(compiled_model("linear_relu"), "gone2"), tmp_path / "b", 120)
    finally:
        dev.stop()
        subprocess.run(["adb", "disconnect", dev.serial], capture_output=True)
        kill_left_runners(dev.sandbox)


def kill_left_runners(sandbox: Path) -> None:
    """A runner leads its own process group, so a vanished loopback (which kills only its
    shells) leaves it running on the host, as a phone would: kill it by its pid file."""
    for pid_file in sandbox.glob("data/local/tmp/*/runs/*/runner.pid"):
        pid = pid_file.read_text().strip()
        if pid.isdigit():
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_farm_file_selects_devices_and_soc(pytester, phone, tmp_path, monkeypatch):
    """--farm: the file's devices and SoC overrides reach the session (through the plugin)."""
    farm = tmp_path / "farm.yaml"
    farm.write_text(f"adb_server: 127.0.0.1:5037\ndevices:\n  - serial: {phone.serial}\n    soc: SM8750\n")
    pytester.makepyfile(test_f="""
        def test_f(hil_device):
            assert hil_device.info.soc == "SM8750"
            assert hil_device.info.serial.startswith("127.0.0.1:")
    """)
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(CACHE))
    result = pytester.runpytest(f"--farm={farm}", "--runner=python")
    result.assert_outcomes(passed=1)


def test_dsp_heap_readings_come_back_over_adb(tmp_path_factory, tmp_path, sdk, compiled_model):
    """The phone path of the DSP heap reading: the payload's variable, the interposer on the
    device, the trace pulled back with the run's output, the check. The device's libQnnHtp.so
    is the DSP emulation of test_dsp_heap_chain.py (a phone's answers over the simulator)."""
    from harness.qnn import dsp_heap
    from harness.results.assertions import assert_dsp_heap_bounded, assert_steps_ok
    from harness.qnn.trace import replay
    from harness.scenario.library import s4_cleanup_reload

    emulation = build_emulation(tmp_path_factory.mktemp("dsp"))
    env = {**sdk.device_environment(), "HARNESS_QNN_REAL_HTP": str(emulation),
           "DSP_EMULATION_REAL_HTP": str(sdk.real_lib_dir / "libQnnHtp.so")}
    start_server()
    dev = LoopbackDevice(tmp_path_factory.mktemp("dsp-phone"), extra_env=env).start()
    connect(dev.serial)
    session = HilSession(options(tmp_path, dev.serial, dsp_heap="on"))
    try:
        device = session.device
        assert device.dsp_heap and "--dsp-heap on" in device.dsp_heap_note
        assert device.run_env[dsp_heap.ENV] == "1"
        result = ScenarioDriver(device, tmp_path / "run", 300).run(
            s4_cleanup_reload(compiled_model("linear_relu"), 2))
        assert_steps_ok(result)
        readings = replay(result.trace).dsp
        assert [r.event for r in readings[:2]] == ["DSP:before_context_created",
                                                   "DSP:after_context_created"]
        assert len(readings) == 8  # two figures per create and per free, two cycles
        snapshots = [s for s in result.steps if s.step.op == "snapshot"]
        assert all(s.trace["dsp_heap"] == readings[0].bytes for s in snapshots)
        config = session.soc_config
        assert_dsp_heap_bounded(result, config.dsp_heap_context_kb, config.dsp_heap_leak_kb,
                                device.dsp_heap)
    finally:
        session.close()
        disconnect(dev.serial, missing_ok=True)
        dev.stop()


@pytest.mark.parametrize("variant", ["stock", "fix-model"])
def test_a_runtime_variant_rides_with_the_runner_to_the_device(variant, phone, compiled_model,
                                                                tmp_path, hil_session, monkeypatch):
    """The backend-registry wrapper is pushed to the workspace and preloaded into the device's
    runs: on stock S1's survivor fails as on the simulator (the delegate cache), on the fix
    model each Module has its own manager and it executes."""
    from harness.runtime.variants import ENV, LIB_NAME

    monkeypatch.setenv(ENV, variant)
    device = HilSession(options(tmp_path, phone.serial, runner=hil_session.options.runner)).device
    try:
        result = ScenarioDriver(device, tmp_path / "run", 300).run(
            s1_two_modules(compiled_model("linear_relu")))
        assert (phone.sandbox / str(device.workspace).lstrip("/") / LIB_NAME).is_file()
    finally:
        device.close()
    assert f"[harness registry wrapper] runtime variant {variant}" in result.output.stderr
    survivor = result.steps[5]
    if variant == "stock":
        assert survivor.status != "ok" and "DelegateHandle has been deleted" in survivor.log
    else:
        assert all(s.ok for s in result.steps), [(s.status, s.message) for s in result.steps]


@pytest.mark.parametrize("api", ["dlopen.libQnnHtp.so", "QnnSystemInterface_getProviders"])
def test_a_dlopen_sweep_point_gives_the_simulators_verdict(adb_device, phone, compiled_model,
                                                           scenario_driver, tmp_path, api):
    """The runner on the device preloads the dlopen shim as the simulator's does: the sweep's
    points of the runtime's dlopen of libQnnHtp.so and of libQnnSystem.so's entry point (which
    the shim answers for) are traced on the loopback phone, failing one fails the load there
    too, and the verdict (the calls, each step's status, what the judge finds) is the
    simulator's."""
    from harness.qnn.interposer_build import DLOPEN_SHIM_NAME

    from sweep_parity import sweep_point

    model = compiled_model("linear_relu")
    on_phone = sweep_point(ScenarioDriver(adb_device, tmp_path / "phone", 300), model, api)
    assert (phone.sandbox / str(adb_device.workspace).lstrip("/") / DLOPEN_SHIM_NAME).is_file()
    assert on_phone.injected and on_phone.failures == (), on_phone
    assert on_phone == sweep_point(scenario_driver, model, api)

