"""A stateful method's reference: the n-th execute since its Module loaded it is judged against
the reference's n-th (a new load, a destroy or an unload starts the count again), failure
messages name the reference used, and --etrecord input is checked."""

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.plugin.options import _etrecords
from harness.programs.compile import CompiledModel, MethodReference
from harness.protocol.tensors import TensorFile
from harness.protocol.scenario_file import ScenarioError
from harness.protocol.output import RunOutput
from harness.protocol.wire import EVENT_PREFIX
from harness.results.assertions import state_divergences
from harness.results.failures import carried_states, run_failures
from harness.results.known_issues import load_known_issues
from harness.results.run import ScenarioResult
from harness.scenario import Scenario


def stateful_model(tmp_path: Path, executes: int = 3) -> CompiledModel:
    inputs = (TensorFile("float32", (16,), tmp_path / "in.bin"),)
    sequence = tuple((TensorFile("float32", (16,), tmp_path / f"out{n}.bin"),)
                     for n in range(1, executes + 1))
    ref = MethodReference(inputs, sequence[0], sequence, ("acc",))
    return CompiledModel("acc", "qnn", "SM8650", "fp16", tmp_path / "acc.pte",
                         {"forward": ref}, 0.02, 0.02, reference="eager PyTorch on CPU")


def expected_files(sc: Scenario) -> list[str]:
    return [Path(s["expected"][0]["file"]).name for s in sc.to_json()["steps"]
            if s["op"] == "execute"]


def test_each_module_counts_its_own_executes_from_its_load(tmp_path):
    model = stateful_model(tmp_path)
    sc = Scenario("s").load_module("A", model).execute("A", "forward").execute("A", "forward")
    sc.load_module("B", model).execute("B", "forward").execute("A", "forward")
    sc.destroy_module("A").load_module("A", model).execute("A", "forward")
    sc.unload_method("B", "forward").execute("B", "forward")
    assert expected_files(sc) == ["out1.bin", "out2.bin", "out1.bin", "out3.bin", "out1.bin",
                                  "out1.bin"]
    assert [o for row in sc.ordinals() for o in row if o is not None] == [1, 2, 1, 3, 1, 1]
    assert set(sc.files()) >= {tmp_path / f"out{n}.bin" for n in (1, 2, 3)}


def test_parallel_executes_count_per_module(tmp_path):
    model = stateful_model(tmp_path)
    sc = Scenario("p").load_module("A", model).load_module("B", model).execute("A", "forward")
    sc.parallel(("execute", "A", "forward"), ("execute", "B", "forward"))
    assert sc.ordinals()[-1] == (2, 1)
    parallel = sc.to_json()["steps"][-1]["steps"]
    assert [Path(s["expected"][0]["file"]).name for s in parallel] == ["out2.bin", "out1.bin"]


def test_more_executes_than_the_reference_covers_is_refused(tmp_path):
    model = stateful_model(tmp_path, executes=2)
    sc = Scenario("long").load_module("A", model)
    for _ in range(3):
        sc.execute("A", "forward")
    with pytest.raises(ScenarioError, match=r"covers executes 1\.\.2 of a method since its "
                                            r"load, not execute 3"):
        sc.to_json()


def test_a_stateless_method_has_one_reference(tmp_path):
    ref = MethodReference((), (TensorFile("float32", (1,), tmp_path / "o.bin"),))
    assert not ref.stateful and ref.expected_at(5) == ref.expected


def test_etrecord_option(tmp_path):
    a, b = tmp_path / "a.pte", tmp_path / "b.pte"
    record = tmp_path / "a.etrecord"
    record.write_bytes(b"x")
    assert _etrecords([str(record)], [a]) == {a: record}
    assert _etrecords([f"{b}={record}"], [a, b]) == {b: record}
    with pytest.raises(HarnessError, match="say which one it belongs to"):
        _etrecords([str(record)], [a, b])
    with pytest.raises(HarnessError, match="is not one of the --pte programs"):
        _etrecords([f"{tmp_path / 'c.pte'}={record}"], [a, b])
    with pytest.raises(HarnessError, match="no such file"):
        _etrecords([str(tmp_path / "missing")], [a])
    with pytest.raises(HarnessError, match="two ETRecords"):
        _etrecords([str(record), str(record)], [a])


def test_each_execute_since_a_load_gets_its_own_inputs(tmp_path):
    """A stateful method with an input sequence (a user's program with generated inputs): the
    n-th execute since a load is fed the n-th input set, so a state whose outputs from a zero
    start do not depend on the step (a running mean) still shows where it came from."""
    model = stateful_model(tmp_path)
    ref = model.methods["forward"]
    sets = tuple((TensorFile("float32", (16,), tmp_path / f"in{n}.bin"),) for n in (1, 2, 3))
    model = dataclasses.replace(model, methods={"forward": dataclasses.replace(
        ref, inputs=sets[0], input_sequence=sets)})
    sc = Scenario("s").load_module("A", model).execute("A", "forward").execute("A", "forward")
    sc.load_module("B", model).execute("B", "forward").execute("A", "forward")
    fed = [Path(s["inputs"][0]["file"]).name for s in sc.to_json()["steps"]
           if s["op"] == "execute"]
    assert fed == ["in1.bin", "in2.bin", "in1.bin", "in3.bin"]
    assert set(sc.files()) >= {tmp_path / f"in{n}.bin" for n in (1, 2, 3)}


def _mean_run(tmp_path: Path, outputs: dict[int, np.ndarray],
              uninitialised: tuple[int, ...] = (), words: str = "") -> ScenarioResult:
    """A second Module's run of a two-buffer running mean as a runner reports it: step i's
    execute gave outputs[i], a mismatch against the reference unless it is `right`."""
    model = stateful_model(tmp_path)
    zero = tuple((TensorFile("float32", (16,), tmp_path / f"zero{n}.bin"),) for n in (1, 2, 3))
    for n, values in enumerate(ZERO_START, 1):
        values.astype(np.float32).tofile(tmp_path / f"zero{n}.bin")
        (values + 0.3).astype(np.float32).tofile(tmp_path / f"out{n}.bin")  # the meaning
    model = dataclasses.replace(model, methods={"forward": dataclasses.replace(
        model.methods["forward"], zero_start=zero,
        uninitialised_elements=(uninitialised,) if uninitialised else (),
        uninitialised=words)})
    sc = Scenario("stateful_second_module").load_module("A", model)
    sc.execute("A", "forward", emit_outputs=True).execute("A", "forward", emit_outputs=True)
    sc.load_module("B", model).execute("B", "forward", emit_outputs=True)
    sc.execute("B", "forward", emit_outputs=True).execute("A", "forward", emit_outputs=True)
    stdout, stderr = [], []
    for i, step in enumerate(sc.steps):
        stderr.append(f"HARNESS_STEP {i}")
        out, status = [], "ok"
        if i in outputs:
            raw = outputs[i].astype(np.float32).tobytes()
            out = [{"dtype": "float32", "shape": [16], "data": base64.b64encode(raw).decode(),
                    "sha256": hashlib.sha256(raw).hexdigest()}]
            status = "mismatch"
        stdout.append(EVENT_PREFIX + json.dumps({
            "event": "step", "index": i, "op": step.op, "module": step.module,
            "method": step.method, "status": status, "error_code": 0, "message": "",
            "elapsed_ms": 1.0, "outputs": out, "max_abs_diff": 1.0, "option": None,
            "trace_offset": 0, "memory": {"rollup": {"Rss": 1}, "mappings": {},
                                          "dmabuf": {"count": 0, "bytes": 0}}}))
    stderr.append("HARNESS_STEP -1")
    stdout.append(EVENT_PREFIX + json.dumps({"event": "end", "status": "ok",
                                             "steps": len(sc.steps), "failed_steps": 0}))
    return ScenarioResult.build(sc, RunOutput(0, "\n".join(stdout), "\n".join(stderr),
                                              runner="native"), [])


X = np.linspace(-1, 1, 48).reshape(3, 16)
ZERO_START = [X[:n].mean(axis=0) for n in (1, 2, 3)]


def test_a_second_module_continuing_the_first_ones_state_is_named(tmp_path):
    """A running mean's buffers never initialised (each execute its zero-start output) and
    shared by two Modules: B's first execute continues A's state, so it is no execute of the
    reference's sequence; it differs from A's first, which was right, and A's next follows
    that shared state. Each mismatch says so in words the shared-buffer entry matches."""
    shared = [X[0], X[1], X[0]]  # A's two executes, then B's first on top of A's state
    result = _mean_run(tmp_path, {1: ZERO_START[0], 2: ZERO_START[1],
                                  4: np.mean(shared, axis=0),
                                  5: np.mean(shared + [X[1]], axis=0),
                                  6: np.mean(shared + [X[1], X[2]], axis=0)})
    words = {f.step: f.message for f in run_failures(result) if f.kind == "mismatch"}
    assert "modules A and B share one state" in words[4] and "step 1" in words[4]
    assert "started at zero" in words[5]  # (x1 + x2 + x1 + x2) / 4: the zero start again
    assert "output 0 is off while modules A and B share one state (step 4 shows it)" in words[6]
    entry = next(i for i in load_known_issues()
                 if i.id == "qnn-mutable-buffer-shared-across-modules")
    assert all(entry.covers(f) for f in run_failures(result) if f.step in (4, 6))
    assert "do not each start from the program's initial state" in "\n".join(
        state_divergences(result))


def test_modules_that_keep_their_own_state_are_no_carried_state(tmp_path):
    """Control: B's executes are what A's were (each its own zero start): no carried state,
    nothing named by the shared-buffer entry."""
    result = _mean_run(tmp_path, {1: ZERO_START[0], 2: ZERO_START[1], 4: ZERO_START[0],
                                  5: ZERO_START[1], 6: ZERO_START[2]})
    assert not carried_states(result)
    assert all("share one state" not in f.message for f in run_failures(result))
    assert not state_divergences(result)


def test_more_than_half_garbage_where_the_solo_runs_read_uninitialised_memory(tmp_path):
    """A delegated buffer whose memory the heap left mostly garbage (11 of 16 elements at
    +-131008, one S5 run of acc_delegated): elements the two solo runs showed uninitialised,
    of a size no execute gives, are garbage, so the output is still the zero-start pattern the
    initial-value entry names. The same elements not shown uninitialised, or a carried state
    of ordinary size over them, are not."""
    garbage = ZERO_START[0].copy()
    bad = (0, 4, 6, 8, 10, 11, 12, 13, 14, 15, 1)
    garbage[list(bad)] = 131008.0
    entry = next(i for i in load_known_issues() if i.id == "qnn-mutable-buffer-initial-value")
    found = run_failures(_mean_run(tmp_path, {1: garbage}, uninitialised=tuple(range(16))))
    assert "started at zero, not at their initial value (5 of 16 elements; 11 other" in \
        found[0].message and entry.covers(found[0])
    found = run_failures(_mean_run(tmp_path, {1: garbage}))
    assert "pattern" not in found[0].message and not entry.covers(found[0])
    wrong = ZERO_START[0].copy()
    wrong[list(bad)] += 0.5  # a state carried over, not memory nobody wrote
    found = run_failures(_mean_run(tmp_path, {1: wrong}, uninitialised=tuple(range(16))))
    assert "pattern" not in found[0].message


FINDING = ("mean.pte: the program's solo run read uninitialised memory in method 'forward': "
           "made twice with the heap filled differently (MALLOC_PERTURB_=85 and 170), its "
           "outputs differ in forward execute 1 output 0: 16 of 16 element(s); each execute "
           "is judged against the ETRecord; the mutable buffers inspect found: mutable buffer "
           "b_count of forward: inside the QnnBackend delegate")


def test_a_wrong_output_only_where_the_solo_runs_read_uninitialised_memory_is_that_finding(
        tmp_path):
    """A running mean divided by a garbage count reads 0 where the count is garbage: not of a
    size no execute gives, and more than half of the elements, so no zero-start pattern. Every
    element that differs is one the two heap fills showed uninitialised, so the mismatch is
    the program's finding, which the initial-value entry names; an element they did not show
    is not excused."""
    out = ZERO_START[0].copy()
    out[[0, 2, 4, 6, 8, 10, 12, 14, 15]] = 0.0
    entry = next(i for i in load_known_issues() if i.id == "qnn-mutable-buffer-initial-value")
    found = run_failures(_mean_run(tmp_path, {1: out}, tuple(range(16)), FINDING))
    assert "output 0: 16 of 16 element(s) differ, all of them elements read from memory " \
           "nobody wrote: mean.pte: the program's solo run" in found[0].message
    assert entry.covers(found[0])
    found = run_failures(_mean_run(tmp_path, {1: out}, tuple(range(1, 16)), FINDING))
    assert "pattern" not in found[0].message and not entry.covers(found[0])
