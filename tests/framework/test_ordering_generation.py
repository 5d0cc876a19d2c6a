"""Ordering enumeration, sampling and shrinking (against a stand-in run function)."""

import math
from pathlib import Path
from typing import ClassVar

from harness.programs.compile import CompiledModel, MethodReference
from harness.drive.orderings import (ModulePlan, explore, interleavings, random_interleavings,
                               signature, to_scenario)
from harness.scenario.reference import predict
from harness.protocol.tensors import TensorFile


def model(methods=("forward",)) -> CompiledModel:
    ref = MethodReference((TensorFile("float32", (1,), Path("/x")),), ())
    return CompiledModel("m", "qnn", "SM8650", "fp16", Path("/m.pte"), {m: ref for m in methods}, 0, 0)


def test_exhaustive_count_is_the_binomial():
    plans = [ModulePlan("A", model()), ModulePlan("B", model())]
    all_orders = list(interleavings(plans))
    assert len(all_orders) == math.comb(8, 4)  # two chains of 4 operations
    assert len({tuple(o) for o in all_orders}) == len(all_orders)
    for ops in all_orders:  # every ordering is valid for the reference model
        assert all(e.step_ok for e in predict(to_scenario("x", plans, ops)))


def test_method_order_within_module_is_respected():
    plans = [ModulePlan("M", model(("prefill", "decode")), ("prefill", "decode"), unload=True)]
    orders = list(interleavings(plans))
    for ops in orders:
        for m in ("prefill", "decode"):
            idx = [ops.index((k, "M", m)) for k in ("load_method", "execute", "unload_method")]
            assert idx == sorted(idx)
        assert ops[0][0] == "load_module" and ops[-1][0] == "destroy_module"
    assert len(orders) == math.comb(6, 3)


def test_random_orderings_are_seeded():
    plans = [ModulePlan("A", model()), ModulePlan("B", model()), ModulePlan("C", model())]
    assert random_interleavings(plans, 5, seed=3) == random_interleavings(plans, 5, seed=3)
    assert len({tuple(o) for o in random_interleavings(plans, 20, seed=1)}) > 1


def b_executed_after_a_destroyed(scenario):
    """A stand-in for `check`: the "bug" is executing B after A was destroyed."""
    ops = [(s.op, s.module, s.method) for s in scenario.steps]
    if (("destroy_module", "A", None) in ops and ("execute", "B", "forward") in ops
            and ops.index(("destroy_module", "A", None)) < ops.index(("execute", "B", "forward"))):
        return "scenario x: step 3 execute(B.forward): error [1] DelegateHandle has been deleted"
    return None


def test_shrinks_to_minimal_failing_ordering(monkeypatch):
    import harness.drive.orderings as orderings

    plans = [ModulePlan("A", model()), ModulePlan("B", model()), ModulePlan("C", model())]

    monkeypatch.setattr(orderings, "check", b_executed_after_a_destroyed)
    class Echo:  # "runs" a scenario by handing it back: check() above reads its steps
        def run(self, sc):
            return sc

        def run_batch(self, scenarios, jobs):
            return map(self.run, scenarios)

        def release(self, result):
            pass

    exploration = explore(Echo(), "t", plans, random_interleavings(plans, 30, seed=7))
    assert exploration.failures
    minimal = exploration.failures[0].minimal
    assert {o[1] for o in minimal} == {"A", "B"}  # module C shrunk away
    assert ("destroy_module", "A", None) in minimal and ("execute", "B", "forward") in minimal
    assert "DelegateHandle has been deleted" in exploration.report()
    assert signature("scenario x: step 3 execute(B.forward): error [1] boom") == "execute error"


def test_hypothesis_search_shrinks_and_replays(monkeypatch, tmp_path):
    """The Hypothesis search (harness.drive.search) finds the same stand-in bug, shrinks it
    to the two operations that make it plus their modules' loads and destroys, and the next
    search replays that ordering first from its example database."""
    import harness.drive.search as search_module
    from harness.drive.search import orderings_strategy, search

    plans = [ModulePlan("A", model()), ModulePlan("B", model()), ModulePlan("C", model())]

    class Echo:
        ran: ClassVar[list] = []

        def run(self, sc):
            Echo.ran.append([(s.op, s.module, s.method) for s in sc.steps if s.op != "snapshot"])
            return sc

    monkeypatch.setattr(search_module, "check", b_executed_after_a_destroyed)
    first = search(Echo(), "t", plans, examples=200, database=tmp_path)
    assert first.failures, "no failing ordering found in 200 examples"
    minimal = first.failures[0].minimal
    assert minimal == [("load_module", "A", None), ("destroy_module", "A", None),
                       ("load_module", "B", None), ("execute", "B", "forward"),
                       ("destroy_module", "B", None)], minimal
    Echo.ran = []
    again = search(Echo(), "t", plans, examples=200, database=tmp_path)
    assert again.failures[0].minimal == minimal
    assert Echo.ran[0] == minimal and len(Echo.ran) <= 3  # replayed first from the database

    from hypothesis import find

    drawn = find(orderings_strategy(plans), lambda ops: len({o[1] for o in ops}) == 3)
    assert all(e.step_ok for e in predict(to_scenario("x", plans, drawn)))
