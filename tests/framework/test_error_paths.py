"""Bad input and misbehaving runners: clear errors, nothing lost, the session goes on.

These use the real runtime on the session's device (the simulator by default). The crash and
hang cases replace only the runner *command* with a process that really crashes or hangs, so
the harness's process handling, event parsing and reporting are the code under test.
"""

import json
import shlex
import shutil
import sys
import textwrap

import pytest

from harness.devices.simulator import SimulatorDevice
from harness.drive.driver import ScenarioDriver
from harness.errors import ModelError
from harness.runner.select import RunnerChoice, choose_runner
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


def test_a_file_that_is_not_a_program_never_reaches_a_runner(compiled_model, scenario_driver,
                                                             tmp_path):
    import dataclasses

    model = compiled_model("linear_relu")
    bad = tmp_path / "corrupt.pte"
    data = bytearray(model.pte.read_bytes())
    data[4:8] = b"XXXX"  # the flatbuffer file identifier
    bad.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(ModelError, match=r"corrupt.pte: not an ExecuTorch program"):
        scenario_driver.run(one_step_scenario(dataclasses.replace(model, pte=bad), "corrupt"))
    assert scenario_driver.results == []  # refused before any runner started


@pytest.mark.parametrize("runner", ["native", "python"])
def test_a_runner_given_random_bytes_reports_a_step_error(compiled_model, hil_device,
                                                          hil_session, tmp_path, runner,
                                                          simulator_device):
    """What the runtime itself does with a file that is not a program (the harness refuses
    such files, so this bypasses it): a load error, not a crash. The 1.5.1 pybindings abort
    instead (known issue pybindings-abort-on-non-utf8-log)."""
    import dataclasses
    import random

    from harness.results.assertions import assert_completed
    from harness.qnn.trace import parse_trace
    from harness.results.run import ScenarioResult

    if not isinstance(hil_device, SimulatorDevice):
        pytest.skip("runs a chosen runner on the host simulator; other devices use the native one")
    noise = random.Random(7)
    bad = tmp_path / "random.pte"
    bad.write_bytes(bytes(noise.randrange(256) for _ in range(4096)))
    sc = one_step_scenario(dataclasses.replace(compiled_model("linear_relu"), pte=bad), "random")
    out = runner_device(simulator_device, runner).run(sc, tmp_path / "run", hil_session.timeout)
    result = ScenarioResult.build(sc, out, parse_trace(out.trace_text), tmp_path / "run")
    assert_completed(result)
    assert result.steps[0].status == "error", result.summary()
    assert result.steps[0].event["message"]


def runner_device(simulator_device, runner: str) -> SimulatorDevice:
    """A simulator device of its own with the `runner` ("native" or "python") runner."""
    choice = choose_runner(runner)
    if choice.kind != runner:
        pytest.fail(f"{runner} runner unavailable: {choice.notice}")
    return simulator_device(choice)


EMIT_FIRST_STEP = """
import json, os, signal, sys, time
print("HARNESS_EVENT " + json.dumps({"event": "step", "index": 0, "op": "load_module",
      "status": "ok", "trace_offset": 0}), flush=True)
print("runtime: about to run execute", file=sys.stderr, flush=True)
"""


@pytest.fixture
def crash_device(simulator_device):
    def make(script):
        runner = RunnerChoice("python", None, argv=(sys.executable, "-c", textwrap.dedent(script)))
        return simulator_device(runner)
    return make


def test_runner_crash_reports_signal_last_step_and_log(compiled_model, crash_device, tmp_path):
    device = crash_device(EMIT_FIRST_STEP + "os.kill(os.getpid(), signal.SIGSEGV)\n")
    driver = ScenarioDriver(device, tmp_path, timeout=60)
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
    driver = ScenarioDriver(device, tmp_path, timeout=2)
    import time

    started = time.monotonic()
    with pytest.raises(AssertionError, match="runner hung: killed after timeout"):
        driver.run(one_step_scenario(compiled_model("linear_relu"), "hang"))
    assert time.monotonic() - started < 30


def test_session_goes_on_after_a_crash(compiled_model, scenario_driver):
    """After the crash and hang above, a normal scenario still runs on the same device."""
    result = scenario_driver.run(one_step_scenario(compiled_model("linear_relu"), "after"))
    assert [s.status for s in result.steps] == ["ok", "ok", "ok"]


def test_refused_scenario_is_reported_with_the_runner_reason(tmp_path, compiled_model,
                                                             simulator_device):
    """A scenario the runner rejects (exit 2) fails with the runner's own reason."""
    script = "import sys; print('scenario names missing files: x.bin', file=sys.stderr); sys.exit(2)"
    runner = RunnerChoice("python", None, argv=(sys.executable, "-c", script))
    device = simulator_device(runner)
    driver = ScenarioDriver(device, tmp_path, timeout=60)
    with pytest.raises(AssertionError, match=r"(?s)runner refused the scenario.*missing files: x.bin"):
        driver.run(one_step_scenario(compiled_model("linear_relu"), "refused"))


@pytest.mark.parametrize("runner", ["native", "python"])
def test_a_short_input_file_is_refused_before_any_step(compiled_model, hil_device, hil_session,
                                                       tmp_path, runner, simulator_device):
    """An input file shorter than its shape: the scenario cannot be run as written, so both
    runners refuse it before the first step (exit 2, no events), naming the file and both
    sizes (harness.protocol.scenario_check.check_tensor_sizes). The Python runner used to run it and report
    the execute step's error; a step that raises inside it is still that step's error
    (tests/framework/test_protocol.py)."""
    import dataclasses

    from harness.programs.compile import MethodReference
    from harness.qnn.trace import parse_trace
    from harness.results.run import ScenarioResult
    from harness.protocol.tensors import TensorFile

    if hil_device.info.kind != "simulator":
        pytest.skip("runs both runners on the host simulator")
    model = compiled_model("linear_relu")
    ref = model.methods["forward"]
    short = tmp_path / "short.bin"
    short.write_bytes(ref.inputs[0].file.read_bytes()[:6])
    bad_input = TensorFile(ref.inputs[0].dtype, ref.inputs[0].shape, short)
    bad = dataclasses.replace(model, methods={"forward": MethodReference((bad_input,), ref.expected)})
    sc = one_step_scenario(bad, "short_input")
    out = runner_device(simulator_device, runner).run(sc, tmp_path / "run", hil_session.timeout)
    result = ScenarioResult.build(sc, out, parse_trace(out.trace_text))
    assert result.refused and result.failure_kind == "refused", result.crash_report()
    assert all(s.event is None for s in result.steps)
    assert "short.bin has 6 bytes, shape and dtype need" in out.stderr, out.stderr


def test_each_launch_of_a_repeated_scenario_keeps_its_own_artifacts(compiled_model, hil_session,
                                                                    simulator_device, tmp_path):
    """A scenario launched until it crashes (S5 cold) keeps each launch's artifacts: the
    crash's directory, which its replay command and results.json name, holds the crash, and
    the passing launches (written at the test's end, as the `scenario_driver` fixture does for
    a failed test) have directories of their own instead of being written over it. Launch 2 of
    3 crashes: its runner is a stand-in that dies of SIGSEGV after its first step; the others
    are the session's real runner."""
    from harness.plugin.keys import DRIVER
    from harness.plugin.replay import _replay_command
    from harness.results import run_entry
    from harness.results.failures import HilFailure, run_failures

    real = choose_runner("auto")
    crash = shlex.join([sys.executable, "-c", textwrap.dedent(
        EMIT_FIRST_STEP + "os.kill(os.getpid(), signal.SIGSEGV)\n")])
    count = tmp_path / "launches"
    script = (f'n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 )); echo $n > {count}\n'
              f'if [ "$n" = 2 ]; then exec {crash}; fi\n'
              f'exec {shlex.join(real.command("")[:-1])} "$@"\n')
    device = simulator_device(RunnerChoice(real.kind, real.binary,
                                           argv=("bash", "-c", script, "runner")))
    artifacts = tmp_path / "test"
    driver = ScenarioDriver(device, artifacts, timeout=120, defer_artifacts=True)
    sc = one_step_scenario(compiled_model("linear_relu"), "repeated")
    results = [driver.run(sc, allow_crash=True) for _ in range(3)]
    assert [r.crashed for r in results] == [False, True, False], [r.summary() for r in results]
    driver.write_artifacts()  # the passing launches, held back until the test failed

    dirs = [artifacts / "repeated", artifacts / "repeated.launch-2", artifacts / "repeated.launch-3"]
    assert [r.artifacts for r in results] == dirs
    crashed = json.loads((dirs[1] / "result.json").read_text())
    assert crashed["returncode"] == -11, crashed  # SIGSEGV
    assert "about to run execute" in (dirs[1] / "runner.stderr").read_text()
    for passed in (dirs[0], dirs[2]):
        assert json.loads((passed / "result.json").read_text())["returncode"] == 0
        assert (passed / "scenario.json").is_file() and (passed / "replay.json").is_file()

    # The failure's replay line and the run's results.json entry name the crash's directory.
    stash = pytest.Stash()
    stash[DRIVER] = driver
    item = type("Item", (), {"stash": stash})()
    failure = run_failures(results[1])
    exc = HilFailure("crashed in launch 2 after 1 passing launch", failure[0])
    assert _replay_command(item, exc) == f"python -m harness replay {dirs[1]} --simulator"
    entry = run_entry(results[1], failure, nodeid="t", index=1, occurrence=1, device=None)
    assert entry["artifacts"] == str(dirs[1])
    assert entry["replay"] == f"python -m harness replay {dirs[1]} --simulator"
