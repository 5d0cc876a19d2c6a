"""The QNN nemesis on a device: held threads, injected failures, and the clear error a
rendezvous that cannot happen gets. Runs the real runtime, runner and interposer on the
session's device (the simulator by default), native runner only (the Python runner's threads
carry no OS names). The rule grammar: test_nemesis_rules.py.
"""

import json

import pytest

from harness.protocol.nemesis import fail_at, hold, nemesis_events
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


def test_an_export_carries_rules_on_qnn_calls_and_refuses_thread_rules(compiled_model, tmp_path):
    """A standalone export hands rules on QNN calls of any thread to the interposer in its
    run.sh; a rule naming a thread or a runner step holds only in the harness's runner, so the
    export refuses it with one clear error."""
    from harness.export.cpp import export_cpp
    from harness.export.plan import ExportError, build_plan
    from harness.replay import RunRecord

    model = compiled_model("linear_relu")
    sc = load_and_execute(model, "nemesis_export").allow_error().destroy_module("A")
    sc.nemesis(fail_at("QnnGraph_execute", 1, "QNN_GRAPH_ERROR_INVALID_HANDLE"))
    plan = build_plan(RunRecord(tmp_path, sc, {}, {}))
    export_cpp(plan, tmp_path / "out")
    assert "export HARNESS_QNN_NEMESIS='fail QnnGraph_execute#1 rc=6001'" in \
        (tmp_path / "out" / "run.sh").read_text()
    sc.nemesis(hold("enter", "A:QnnGraph_execute#1", "leave", "B:step.destroy_module#1"))
    with pytest.raises(ExportError, match=r"names a thread or a runner step.*harness replay"):
        build_plan(RunRecord(tmp_path, sc, {}, {}))
