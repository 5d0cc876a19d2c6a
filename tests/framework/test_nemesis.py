"""The QNN nemesis on a device: held threads, injected failures, and the clear error a
rendezvous that cannot happen gets. Runs the real runtime, runner and interposer on the
session's device (the simulator by default), native runner only (the Python runner's threads
carry no OS names). The rule grammar: test_nemesis_rules.py.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.drive.driver import ScenarioDriver
from harness.protocol.nemesis import NemesisError, fail_at, hold, nemesis_events
from harness.results.failures import HilFailure
from harness.scenario import Scenario


@pytest.fixture
def native_only(hil_session):
    if hil_session.device_runner == "python":
        pytest.skip("nemesis actors are thread names, which only the native runner sets")


def load_and_execute(model, name):
    sc = Scenario(name)
    sc.load_module("A", model).load_method("A", "forward").execute("A", "forward")
    return sc


def test_a_rendezvous_that_cannot_happen_ends_with_a_clear_error(
        native_only, compiled_model, scenario_driver):
    """A's load waits for a module that never runs: the interposer lets it go after the bound,
    and the run fails saying which rule timed out, instead of hanging."""
    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_timeout").destroy_module("A")
    sc.nemesis(hold("enter", "A:QnnContext_createFromBinary#1", "enter", "Z:QnnGraph_execute#1",
                    timeout_ms=300))
    with pytest.raises(HilFailure, match=r"rendezvous timed out after [0-9]+ ms: rule 0") as info:
        scenario_driver.run(sc)
    assert info.value.failure.kind == "nemesis"
    events = nemesis_events(scenario_driver.results[-1].trace)
    assert [e.kind for e in events] == ["rules", "hold", "timeout"]
    assert int(events[-1].fields["waited_ms"]) >= 300


def _replay(run_dir, tmp_path, *args):
    """`python -m harness replay` of this checkout (PYTHONPATH), in its own process."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return subprocess.run([sys.executable, "-m", "harness", "replay", str(run_dir), "--simulator",
                           "--artifacts-dir", str(tmp_path / "replayed"), *args], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_replay_of_a_rendezvous_that_cannot_happen_is_the_same_clear_error(
        native_only, compiled_model, scenario_driver, tmp_path):
    """`harness replay` of that run says what the test said (the rule, the thread that waited,
    where and for what) and exits 1, instead of a traceback out of the driver."""
    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_timeout").destroy_module("A")
    sc.nemesis(hold("enter", "A:QnnContext_createFromBinary#1", "enter", "Z:QnnGraph_execute#1",
                    timeout_ms=300))
    driver = ScenarioDriver(scenario_driver.device, tmp_path / "run", scenario_driver.timeout)
    with pytest.raises(HilFailure) as info:
        driver.run(sc)
    waited = ("thread 'A' waited at enter A:QnnContext_createFromBinary#1 for enter "
              "Z:QnnGraph_execute#1, which no thread reached")
    assert waited in str(info.value)
    proc = _replay(tmp_path / "run" / "nemesis_timeout", tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    assert re.search(r"^FAILED nemesis: the run did not follow its nemesis rules: rendezvous "
                     r"timed out after [0-9]+ ms: rule 0 'hold enter "
                     r"A:QnnContext_createFromBinary#1 until enter Z:QnnGraph_execute#1 "
                     r"timeout_ms=300': " + re.escape(waited), proc.stdout, re.M), out


def test_a_hold_longer_than_the_runner_timeout_is_refused_before_it_runs(
        native_only, compiled_model, scenario_driver, tmp_path):
    """A hold the runner timeout would cut short ends only as "runner hung": the driver, and
    so a test and `harness replay`, refuse it before the runner starts, naming the rule."""
    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_long").destroy_module("A")
    sc.nemesis(hold("enter", "A:QnnContext_createFromBinary#1", "enter", "Z:QnnGraph_execute#1",
                    timeout_ms=10**9))
    with pytest.raises(NemesisError, match=r"rule 0 .*timeout_ms=1000000000 is not under the "
                                           r"runner timeout \(60 s\)"):
        ScenarioDriver(scenario_driver.device, tmp_path / "refused", 60).run(sc)
    assert not (tmp_path / "refused").exists()  # nothing ran
    # A run with a default hold (10 s; its point was reached before, so it waits not at all),
    # replayed with a runner timeout under it: refused, as bad input (exit 2).
    sc = load_and_execute(model, "nemesis_ok").destroy_module("A")
    sc.nemesis(hold("enter", "QnnGraph_execute#1", "leave", "QnnContext_createFromBinary#1"))
    ScenarioDriver(scenario_driver.device, tmp_path / "run", scenario_driver.timeout).run(sc)
    proc = _replay(tmp_path / "run" / "nemesis_ok", tmp_path, "--runner-timeout", "5")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert re.search(r"^error: nemesis rule 0 'hold enter QnnGraph_execute#1 until leave "
                     r"QnnContext_createFromBinary#1': timeout_ms=10000 is not under the runner "
                     r"timeout \(5 s\)", proc.stderr, re.M), out


def test_a_rule_that_never_takes_effect_fails_the_run(native_only, compiled_model,
                                                      scenario_driver):
    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_unmet").destroy_module("A")
    sc.nemesis(fail_at("QnnGraph_execute", 5))  # the scenario executes once
    with pytest.raises(HilFailure, match=r"never took effect"):
        scenario_driver.run(sc)


def test_an_injected_failure_is_the_call_the_rule_names(native_only, compiled_model,
                                                        scenario_driver):
    """The first QnnGraph_execute fails with the rule's code, without calling QNN (no
    graph_execute of rc 0 in the trace), and the step reports an error; the next one runs."""
    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_fail").allow_error().execute("A", "forward")
    sc.destroy_module("A").snapshot()
    sc.nemesis(fail_at("QnnGraph_execute", 1, "QNN_GRAPH_ERROR_INVALID_HANDLE"))
    result = scenario_driver.run(sc)
    assert result.steps[2].status == "error"
    assert result.steps[3].ok and result.last.live.released
    executes = [r for r in result.trace if r.kind == "graph_execute"]
    assert [r.rc for r in executes] == [6001, 0]
    fired = [e for e in nemesis_events(result.trace) if e.kind == "fail"]
    assert len(fired) == 1 and fired[0].fields["rc"] == "6001"
    doc = json.loads(json.dumps(result.scenario.to_json()))
    assert doc["qnn_nemesis"] == ["fail QnnGraph_execute#1 rc=6001"]  # replayable data


@pytest.mark.parametrize("lib, words", [
    ("libQnnHtp.so", "Cannot Open QNN library libQnnHtp.so"),
    ("libQnnSystem.so", "Cannot Open QNN library libQnnSystem.so")])
def test_an_injected_dlopen_failure_is_the_runtimes_own_and_the_next_load_works(
        native_only, compiled_model, scenario_driver, lib, words):
    """The runtime's first attempt to open the QNN library fails (the dlopen shim: its probe
    with RTLD_NOLOAD and the open after it, with the loader's own dlerror), the load reports an
    error with the runtime's words, every QNN handle of the attempt is freed, and a second
    module's load in the same process works."""
    model = compiled_model("linear_relu")
    sc = Scenario("nemesis_dlopen").load_module("A", model).load_method("A", "forward")
    sc.allow_error().destroy_module("A")
    sc.load_module("B", model).load_method("B", "forward").execute("B", "forward")
    sc.destroy_module("B").snapshot()
    sc.nemesis(fail_at(f"dlopen.{lib}", 1))
    result = scenario_driver.run(sc)
    assert result.steps[1].status == "error", result.summary()
    assert words in result.output.stderr and "harness-injected-failure" in result.output.stderr
    assert result.steps[4].ok and result.steps[5].ok and result.last.live.released
    opens = [r for r in result.trace if r.kind == "dlopen" and r.fields["lib"] == lib]
    assert opens[0].fields.get("injected") == "1", opens
    assert any(r.rc == 0 for r in opens[1:]), opens  # B's load opened it


def test_a_hold_orders_two_threads(native_only, compiled_model, scenario_driver):
    """B's load waits until A's load returned: the trace shows B held, then released after
    A's context was created."""
    model = compiled_model("linear_relu")
    sc = Scenario("nemesis_order").load_module("A", model).load_module("B", model)
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"))
    sc.destroy_module("A").destroy_module("B")
    sc.nemesis(hold("enter", "B:step.load_method#1", "leave", "A:step.load_method#1"))
    result = scenario_driver.run(sc)
    kinds = [r.kind for r in result.trace]
    assert kinds.index("nemesis_hold") < kinds.index("context_create") < \
        kinds.index("nemesis_release")


def test_an_export_carries_rules_on_qnn_calls_and_refuses_thread_rules_in_python(
        compiled_model, tmp_path):
    """A standalone export hands the rules to the interposer in its run.sh (and the C++ test in
    its own source). A rule naming a thread or a runner step takes effect only in a program
    that names its threads after modules and marks its steps: the C++ test does, as the native
    runner; the Python export cannot, and says so naming each such rule."""
    from harness.export.cpp import export_cpp
    from harness.export.plan import ExportError, build_plan
    from harness.export.python import export_python
    from harness.replay import RunRecord

    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_export").allow_error().destroy_module("A")
    sc.nemesis(fail_at("QnnGraph_execute", 1, "QNN_GRAPH_ERROR_INVALID_HANDLE"))
    plan = build_plan(RunRecord(tmp_path, sc, {}, {}))
    export_cpp(plan, tmp_path / "out")
    assert "export HARNESS_QNN_NEMESIS='fail QnnGraph_execute#1 rc=6001'" in \
        (tmp_path / "out" / "run.sh").read_text()
    export_python(plan, tmp_path / "py")  # QNN calls of any thread: carried by both
    sc.nemesis(hold("enter", "A:QnnGraph_execute#1", "leave", "B:step.destroy_module#1"))
    plan = build_plan(RunRecord(tmp_path, sc, {}, {}))
    source = export_cpp(plan, tmp_path / "forced") / "test_nemesis_export.cpp"
    assert ('kNemesis = {"fail QnnGraph_execute#1 rc=6001", "hold enter A:QnnGraph_execute#1 '
            'until leave B:step.destroy_module#1"};') in source.read_text()
    with pytest.raises(ExportError, match=r"rule\(s\) 1 'hold enter A:QnnGraph_execute#1 until "
                       r"leave B:step.destroy_module#1' name a thread or a runner step, which "
                       r"the Python export cannot carry: .*GIL.*export it as cpp"):
        export_python(plan, tmp_path / "py2")


def test_a_cpp_export_forces_the_interleaving_and_fails_a_rendezvous_that_cannot_happen(
        native_only, compiled_model, scenario_driver, tmp_path):
    """The C++ export of a forced-race scenario carries its rendezvous: run standalone (run.sh:
    built against the installed runtime, the interposer in front of QNN), B's load waits until
    A's load has returned (rule 0, on step points of named threads: the trace shows B held and
    released after A's context was created), and a rendezvous no thread can meet (rule 1)
    fails the test as in the framework: exit 1, naming the rule. `harness export` of the run
    directory writes it (no error for rules on threads or steps)."""
    from harness.protocol.nemesis import nemesis_events
    from harness.qnn.trace import parse_trace

    sc = Scenario("forced_export")
    sc.load_module("A", compiled_model("linear_relu")).load_module("B", compiled_model("mlp_tanh"))
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"))
    sc.destroy_module("A").destroy_module("B")
    sc.nemesis(hold("enter", "B:step.load_method#1", "leave", "A:step.load_method#1"),
               hold("enter", "A:step.destroy_module#1", "enter", "Z:step.execute#1",
                    timeout_ms=300))
    driver = ScenarioDriver(scenario_driver.device, tmp_path / "run", scenario_driver.timeout)
    with pytest.raises(HilFailure, match="rule 1"):
        driver.run(sc)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = tmp_path / "cpp"
    proc = subprocess.run([sys.executable, "-m", "harness", "export", str(tmp_path / "run" /
                           "forced_export"), "--format", "cpp", "--out", str(out)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = subprocess.run(["bash", str(out / "run.sh")], env=env, capture_output=True, text=True,
                         timeout=900)
    said = ran.stdout + ran.stderr
    assert ran.returncode == 1, said
    assert re.search(r"^FAILED nemesis: rendezvous timed out after [0-9]+ ms: rule 1 'hold enter "
                     r"A:step.destroy_module#1 until enter Z:step.execute#1 timeout_ms=300': "
                     r"thread 'A' waited for a point no thread reached",
                     ran.stdout, re.M), said
    assert "rule 0" not in ran.stdout.split("FAILED nemesis")[1], said
    trace = parse_trace((out / "qnn_trace.txt").read_text())
    events = nemesis_events(trace)
    held = next(e for e in events if e.kind == "hold" and e.rule == 0)
    assert held.fields["actor"] == "B" and held.fields["api"] == "step.load_method", events
    kinds = [r.kind for r in trace]
    released = next(i for i, r in enumerate(trace) if r.kind == "nemesis_release"
                    and r.fields.get("rule") == "0")
    assert kinds.index("nemesis_hold") < kinds.index("context_create") < released, kinds


def test_an_export_of_a_failed_dlopen_preloads_the_shim_or_says_it_cannot(
        native_only, compiled_model, scenario_driver, tmp_path):
    """A scenario whose rule fails the runtime's dlopen of libQnnSystem.so exports as a
    standalone Python test whose run.sh preloads the framework's dlopen shim: standalone, the
    first load fails as in the framework (its step expected to fail) and the rest passes, exit
    0. Given QNN libraries of its own (QNN_SDK_ROOT) and no shim, run.sh says which rule needs
    it, exit 2, instead of a test whose injected failure never happens."""
    model = compiled_model("linear_relu")
    sc = Scenario("dlopen_export").load_module("A", model).load_method("A", "forward")
    sc.allow_error().destroy_module("A")
    sc.load_module("B", model).load_method("B", "forward").execute("B", "forward")
    sc.destroy_module("B")
    sc.nemesis(fail_at("dlopen.libQnnSystem.so", 1))
    ScenarioDriver(scenario_driver.device, tmp_path / "run", scenario_driver.timeout).run(sc)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = tmp_path / "py"
    proc = subprocess.run([sys.executable, "-m", "harness", "export", str(tmp_path / "run" /
                           "dlopen_export"), "--format", "python", "--out", str(out)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'export LD_PRELOAD="$HARNESS_QNN_DLOPEN_SHIM' in (out / "run.sh").read_text()
    ran = subprocess.run(["bash", str(out / "run.sh")], env=env, capture_output=True, text=True,
                         timeout=900)
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0, said
    assert "Cannot Open QNN library libQnnSystem.so" in said, said
    own = {**env, "QNN_SDK_ROOT": str(tmp_path), "HARNESS_QNN_DLOPEN_SHIM": ""}
    ran = subprocess.run(["bash", str(out / "run.sh")], env=own, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert ("run.sh: rule(s) fail dlopen.libQnnSystem.so#1 rc=1100 need the dlopen shim of "
            "executorch-qnn-hil") in ran.stderr, ran.stderr
