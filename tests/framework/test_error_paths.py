"""Bad input and misbehaving runners: clear errors, nothing lost, the session goes on.

These use the real runtime on the session's device (the simulator by default). The crash and
hang cases replace only the runner *command* with a process that really crashes or hangs, so
the harness's process handling, event parsing and reporting are the code under test.
"""

import shutil
import sys
import textwrap

import pytest

from harness.devices.simulator import SimulatorDevice
from harness.driver import ScenarioDriver
from harness.errors import ModelError
from harness.runner.select import RunnerChoice
from harness.scenario import Scenario


def one_step_scenario(model, name="err"):
    return Scenario(name).load_module("A", model).execute("A", "forward").destroy_module("A")


def test_missing_pte_is_a_clear_error(compiled_model, scenario_driver, tmp_path):
    model = compiled_model("linear_relu")
    copy = tmp_path / "model.pte"
    shutil.copy(model.pte, copy)
    import dataclasses

    gone = dataclasses.replace(model, pte=copy)
    copy.unlink()
    with pytest.raises(ModelError, match=r"model.pte does not exist"):
        scenario_driver.run(one_step_scenario(gone))


def test_corrupt_pte_fails_the_step_with_the_runtime_error(compiled_model, scenario_driver, tmp_path):
    import dataclasses

    model = compiled_model("linear_relu")
    bad = tmp_path / "corrupt.pte"
    data = bytearray(model.pte.read_bytes())
    data[4:8] = b"XXXX"  # the flatbuffer file identifier
    bad.write_bytes(bytes(data[: len(data) // 2]))
    result = scenario_driver.run(one_step_scenario(dataclasses.replace(model, pte=bad), "corrupt"))
    assert not result.crashed
    assert result.steps[0].status == "error"
    assert result.steps[0].event["message"]
    assert result.output.returncode == 1
    # the driver kept the evidence
    assert (result.artifacts / "runner.stderr").exists()


EMIT_FIRST_STEP = """
import json, os, signal, sys, time
print("HARNESS_EVENT " + json.dumps({"event": "step", "index": 0, "op": "load_module",
      "status": "ok", "trace_offset": 0}), flush=True)
print("runtime: about to run execute", file=sys.stderr, flush=True)
"""


@pytest.fixture
def crash_device(hil_session):
    def make(script):
        runner = RunnerChoice("python", None, argv=(sys.executable, "-c", textwrap.dedent(script)))
        return SimulatorDevice(hil_session.sdk, hil_session.soc, lambda kind: runner)
    return make


def test_runner_crash_reports_signal_last_step_and_log(compiled_model, crash_device, tmp_path):
    device = crash_device(EMIT_FIRST_STEP + "os.kill(os.getpid(), signal.SIGSEGV)\n")
    driver = ScenarioDriver(device, tmp_path, timeout=60, runner="python")
    sc = one_step_scenario(compiled_model("linear_relu"), "crash")
    with pytest.raises(AssertionError) as exc:
        driver.run(sc)
    report = str(exc.value)
    assert "signal SIGSEGV" in report
    assert "last completed step: load_module(A)" in report
    assert "step in progress: execute(A.forward)" in report
    assert "about to run execute" in report
    result = driver.run(sc, allow_crash=True)
    assert result.crashed and result.steps[1].status == "not-run"


def test_runner_hang_is_killed_after_timeout(compiled_model, crash_device, tmp_path):
    device = crash_device(EMIT_FIRST_STEP + "time.sleep(600)\n")
    driver = ScenarioDriver(device, tmp_path, timeout=2, runner="python")
    import time

    started = time.monotonic()
    with pytest.raises(AssertionError, match="runner hung: killed after timeout"):
        driver.run(one_step_scenario(compiled_model("linear_relu"), "hang"))
    assert time.monotonic() - started < 30


def test_session_goes_on_after_a_crash(compiled_model, scenario_driver):
    """After the crash and hang above, a normal scenario still runs on the same device."""
    result = scenario_driver.run(one_step_scenario(compiled_model("linear_relu"), "after"))
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]


def test_refused_scenario_is_reported_with_the_runner_reason(hil_session, tmp_path, compiled_model):
    """A scenario the runner rejects (exit 2) fails with the runner's own reason."""
    script = "import sys; print('scenario names missing files: x.bin', file=sys.stderr); sys.exit(2)"
    runner = RunnerChoice("python", None, argv=(sys.executable, "-c", script))
    device = SimulatorDevice(hil_session.sdk, hil_session.soc, lambda kind: runner)
    driver = ScenarioDriver(device, tmp_path, timeout=60, runner="python")
    with pytest.raises(AssertionError, match=r"(?s)runner refused the scenario.*missing files: x.bin"):
        driver.run(one_step_scenario(compiled_model("linear_relu"), "refused"))
