"""The native and the Python runner give the same event stream for the same scenario.

Compared step by step: status, error code class, live QNN counts from the trace, and the
outputs' digests. The scenario includes the 1.5.1 isolation failure, so error paths are
compared too, not only the happy path.
"""

import pytest

from harness.drive.driver import ScenarioDriver
from harness.scenario.reference import predict
from harness.runner.select import choose_runner
from harness.scenario import Scenario


def assert_same_events(native, python) -> None:
    """Step by step: status, error or not, live QNN counts, output digests."""
    for i, (n, p) in enumerate(zip(native.steps, python.steps)):
        where = f"step {i} {n.step.describe()}"
        assert n.status == p.status, f"{where}: native {n.describe()} vs python {p.describe()}"
        assert (n.event["error_code"] == 0) == (p.event["error_code"] == 0), where
        assert n.live == p.live, f"{where}: native {n.live} vs python {p.live}"
        assert [o["sha256"] for o in n.event["outputs"]] == [o["sha256"] for o in p.event["outputs"]], where


@pytest.fixture
def both_runners(simulator_device, tmp_path):
    drivers = {}
    for kind in ("native", "python"):
        choice = choose_runner(kind)
        if choice.kind != kind:
            pytest.fail(f"{kind} runner unavailable: {choice.notice}")
        device = simulator_device(choice)
        drivers[kind] = ScenarioDriver(device, tmp_path / kind, 300)
    return drivers


def test_same_events_from_both_runners(both_runners, compiled_model):
    one = compiled_model("linear_relu")
    two = compiled_model("prefill_decode")
    sc = Scenario("parity")
    sc.load_module("A", one).load_module("B", one).execute("A", "forward").execute("B", "forward")
    sc.destroy_module("A").execute("B", "forward").destroy_module("B")
    sc.load_module("M", two).load_method("M", "prefill").load_method("M", "decode")
    sc.execute("M", "decode").unload_method("M", "prefill").execute("M", "decode")
    sc.unload_method("M", "prefill")  # not loaded: a harness-side error in both runners
    sc.destroy_module("M").snapshot()
    results = {kind: driver.run(sc) for kind, driver in both_runners.items()}
    native, python = results["native"], results["python"]
    assert native.output.runner == "native" and python.output.runner == "python"
    assert_same_events(native, python)
    statuses = [s.status for s in native.steps]
    assert "error" in statuses and statuses.count("ok") >= 10
    assert native.output.returncode == python.output.returncode == 1


def test_same_events_from_both_runners_parallel(both_runners, compiled_model):
    """Parallel steps: one event per step with the sub-steps' results, same in both runners.

    A module of a third program is loaded first, so the parallel loads do not start the QNN
    backend themselves (two first context creations at once crash the 1.5.1 stack on the
    simulator, see tests/hil/test_concurrency.py), and the programs differ, so the runtime's
    delegate cache cannot make the result depend on which thread wins: the Python runner's
    threads are serialized by the GIL, the native runner's overlap.
    """
    lin, mlp, two = compiled_model("linear_relu"), compiled_model("mlp_tanh"), compiled_model("prefill_decode")
    sc = Scenario("parity_parallel")
    sc.load_module("W", two).load_method("W", "prefill")
    sc.parallel(("load_module", "A", lin), ("load_module", "B", mlp))
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"))
    sc.parallel(("execute", "A", "forward"), ("execute", "B", "forward"), ("execute", "W", "prefill"))
    # W's decode is not loaded: a harness-side error in one sub-step, the others go on.
    sc.parallel(("unload_method", "A", "forward"), ("destroy_module", "B"),
                ("unload_method", "W", "decode"))
    sc.parallel(("destroy_module", "A"), ("destroy_module", "W"))
    sc.snapshot()
    results = {kind: driver.run(sc) for kind, driver in both_runners.items()}
    native, python = results["native"], results["python"]
    # Distinct programs: the reference model's counts hold even on 1.5.1.
    expected_live = [e.contexts for e in predict(sc)]
    assert expected_live == [0, 1, 1, 3, 3, 1, 0, 0]
    for kind, result in results.items():
        assert [s.live["context"] for s in result.steps] == expected_live, f"{kind}:\n{result.summary()}"
    assert_same_events(native, python)
    for n, p in zip(native.steps, python.steps):
        if n.step.op != "parallel":
            assert "substeps" not in n.event and "substeps" not in p.event, n.step.describe()
            continue
        where = n.step.describe()  # the failure messages below name the step
        for j, (ns, ps) in enumerate(zip(n.event["substeps"], p.event["substeps"], strict=True)):
            sub = n.step.substeps[j]
            assert (ns["op"], ns["module"], ns["method"]) == (sub.op, sub.module, sub.method), where
            assert (ps["op"], ps["module"], ps["method"]) == (sub.op, sub.module, sub.method), where
            assert ns["status"] == ps["status"], f"{where} sub-step {j}: {ns} vs {ps}"
            assert (ns["error_code"] == 0) == (ps["error_code"] == 0), f"{where} sub-step {j}"
            assert [o["sha256"] for o in ns["outputs"]] == [o["sha256"] for o in ps["outputs"]]
            assert isinstance(ns["elapsed_ms"], float) and isinstance(ps["elapsed_ms"], float)
        assert len(n.event["substeps"]) == len(n.step.substeps), where
    assert [s.status for s in native.steps] == ["ok"] * 5 + ["error", "ok", "ok"]
    unload = native.steps[5].event
    assert [s["status"] for s in unload["substeps"]] == ["ok", "ok", "error"]
    assert unload["error_code"] == -1 and "decode" in unload["message"], unload
    executed = native.steps[4].event
    assert len(executed["outputs"]) == 3 and executed["max_abs_diff"] is not None
    assert native.output.returncode == python.output.returncode == 1


@pytest.mark.parametrize("bad, message", [
    ([{"op": "load_method", "module": "A", "method": "forward"},
      {"op": "execute", "module": "A", "method": "forward"}], "two sub-steps on module 'A'"),
    ([{"op": "snapshot"}], "sub-step 0"),
    ([], "sub-steps"),
])
def test_both_runners_refuse_an_invalid_parallel_step(hil_session, compiled_model, tmp_path,
                                                      bad, message):
    """Exit 2 before any step runs (no start event) for a parallel step the protocol forbids."""
    import json
    import os
    import subprocess

    model = compiled_model("linear_relu")
    doc = {"version": 1, "name": "bad_parallel",
           "steps": [{"op": "load_module", "module": "A", "pte": str(model.pte)},
                     {"op": "parallel", "steps": bad}]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    for kind in ("native", "python"):
        choice = choose_runner(kind)
        assert choice.kind == kind, choice.notice
        proc = subprocess.run(choice.command(str(path)), capture_output=True, text=True,
                              env={**os.environ, **choice.environment()}, timeout=120)
        assert proc.returncode == 2, f"{kind}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        assert "HARNESS_EVENT" not in proc.stdout, kind
        assert message in proc.stderr, f"{kind}: {proc.stderr}"
