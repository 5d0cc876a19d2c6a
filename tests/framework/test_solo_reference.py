"""A user program's solo run checked before it is a reference (harness.drive.solo), from runs as a
runner reports them: elements that differ between the two heap fills are uninitialised reads,
the method is marked, and each run that executes it says so once instead of judging outputs;
the fault sweep holds an injected run to its no-injection run (harness.drive.fault_sweep)."""

import base64
import hashlib
import json
from pathlib import Path

import numpy as np

from harness.drive import fault_sweep
from harness.drive.solo import (HEAP_FILLS, perturbed, solo_scenario, uninitialised_reads,
                                unusable_words, with_undefined)
from harness.programs.compile import CompiledModel, MethodReference
from harness.programs.pte import MethodInfo, MutableBuffer, ProgramInfo, TensorSpec
from harness.protocol.output import RunOutput
from harness.protocol.tensors import TensorFile
from harness.protocol.wire import EVENT_PREFIX
from harness.results.failures import run_failures
from harness.results.run import ScenarioResult
from harness.scenario import Scenario


MEMORY = {"rollup": {"Rss": 1000}, "mappings": {}, "dmabuf": {"count": 0, "bytes": 0}}


def model(tmp_path: Path) -> CompiledModel:
    inputs = (TensorFile("float32", (4,), tmp_path / "in.bin"),)
    ref = MethodReference(inputs, ())
    return CompiledModel("mask", "qnn", "SM8650", "fp16", tmp_path / "mask.pte",
                         {"forward": ref}, 1e-4, 1e-4, reference="the solo run")


def info(tmp_path: Path, buffers=()) -> ProgramInfo:
    spec = TensorSpec("float32", (4,))
    return ProgramInfo(tmp_path / "mask.pte", 1, "0" * 64,
                       {"forward": MethodInfo("forward", (spec,), (spec,), ("QnnBackend",))},
                       (), mutable_buffers=tuple(buffers))


def ran(sc: Scenario, outputs: dict[int, np.ndarray]) -> ScenarioResult:
    """`sc` as a runner reports it, every step ok, the executes' outputs `outputs` by step."""
    stdout, stderr = [], []
    for i, step in enumerate(sc.steps):
        stderr.append(f"HARNESS_STEP {i}")
        out = []
        if i in outputs:
            raw = outputs[i].astype(np.float32).tobytes()
            out = [{"dtype": "float32", "shape": [4], "sha256": hashlib.sha256(raw).hexdigest(),
                    "data": base64.b64encode(raw).decode()}]
        stdout.append(EVENT_PREFIX + json.dumps({
            "event": "step", "index": i, "op": step.op, "module": step.module,
            "method": step.method, "status": "ok", "error_code": 0, "message": "",
            "elapsed_ms": 1.0, "outputs": out, "max_abs_diff": 0.0, "option": None,
            "trace_offset": 0, "memory": MEMORY}))
    stderr.append("HARNESS_STEP -1")
    stdout.append(EVENT_PREFIX + json.dumps({"event": "end", "status": "ok",
                                             "steps": len(sc.steps), "failed_steps": 0}))
    return ScenarioResult.build(sc, RunOutput(0, "\n".join(stdout), "\n".join(stderr),
                                              runner="native"), [])


def test_each_solo_run_fills_the_heap_its_own_way(tmp_path):
    runs = [perturbed(solo_scenario(model(tmp_path)), fill) for fill in HEAP_FILLS]
    assert [r.run_env["MALLOC_PERTURB_"] for r in runs] == list(HEAP_FILLS)
    assert len({r.name for r in runs}) == 2
    assert all("tcache_count=0" in r.run_env["GLIBC_TUNABLES"] for r in runs)


def test_elements_that_differ_between_the_heap_fills_are_uninitialised_reads(tmp_path):
    m = model(tmp_path)
    sc = solo_scenario(m)
    first = ran(sc, {1: np.array([1.0, 2.0, 3.0, 4.0])})
    second = ran(sc, {1: np.array([1.0, -131008.0, 3.0, 7.0])})
    reads = uninitialised_reads(m, first, second)
    assert [(r.method, r.execute, r.output, r.elements, r.size) for r in reads] == \
        [("forward", 1, 0, (1, 3), 4)]
    assert uninitialised_reads(m, first, first) == []
    buffer = MutableBuffer("forward", "b_mask", "QnnBackend")
    words = unusable_words(info(tmp_path, [buffer]), reads)["forward"]
    assert "forward execute 1 output 0: 2 of 4 element(s) (index 1, 3)" in words
    assert "mutable buffer b_mask of forward: inside the QnnBackend delegate" in words
    assert "inspect found no mutable buffer" in unusable_words(info(tmp_path), reads)["forward"]


def test_a_method_with_no_reference_says_so_once_per_run_and_is_not_compared(tmp_path):
    m = with_undefined(model(tmp_path), {"forward": "the program's solo run read uninitialised "
                                                    "memory in method 'forward'"})
    assert m.methods["forward"].expected == () and m.methods["forward"].uninitialised
    sc = Scenario("s").load_module("A", m).execute("A", "forward").execute("A", "forward")
    sc.destroy_module("A")
    result = ran(sc, {1: np.zeros(4), 2: np.ones(4)})  # differ: garbage, not compared
    failures = run_failures(result)
    assert [(f.kind, f.step) for f in failures] == [("mismatch", 1)]
    assert failures[0].message.startswith("pattern: the program's solo run read uninitialised")


def test_the_fault_sweep_holds_an_injected_run_to_its_baseline(tmp_path):
    m = fault_sweep.unjudged(model(tmp_path))
    base = Scenario("b").load_module("A", m).execute("A", "forward").destroy_module("A")
    full = fault_sweep.judged_against_baseline(fault_sweep.with_reload(base, m, "forward"))
    wrong_anyway = {1: np.full(4, 9.0), 5: np.full(4, 9.0)}  # A's execute, the reload's
    baseline = ran(full, wrong_anyway)
    assert run_failures(baseline) == []
    assert fault_sweep.output_changes(ran(full, wrong_anyway), baseline) == []
    changed = fault_sweep.output_changes(ran(full, {1: np.full(4, 9.0), 5: np.zeros(4)}),
                                         baseline)
    assert [(f.kind, f.step) for f in changed] == [("mismatch", 5)]
    skip = frozenset({(str(m.pte), "forward")})
    assert fault_sweep.output_changes(ran(full, {1: np.zeros(4), 5: np.zeros(4)}), baseline,
                                      skip) == []
