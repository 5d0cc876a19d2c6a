"""Scenario building, JSON form and parsing, and the reference model's predictions."""

import dataclasses
import json
from pathlib import Path

import pytest

from harness.programs.compile import CompiledModel, MethodReference
from harness.scenario.reference import predict
from harness.protocol.scenario_file import ScenarioError
from harness.scenario import Scenario, parse_scenario
from harness.protocol.tensors import TensorFile


def fake_model(tmp_path: Path, methods=("forward",), backend="qnn") -> CompiledModel:
    """A CompiledModel record (no runtime involved: only the scenario's bookkeeping is tested)."""
    ref = MethodReference((TensorFile("float32", (1, 16), tmp_path / "in.bin"),),
                          (TensorFile("float32", (1, 8), tmp_path / "out.bin"),))
    return CompiledModel("m", backend, "SM8650", "fp16", tmp_path / "m.pte",
                         {name: ref for name in methods}, 0.01, 0.01)


def test_to_json_places_files_and_roundtrips(tmp_path):
    model = fake_model(tmp_path)
    sc = Scenario("s1").load_module("A", model).execute("A", "forward").destroy_module("A")
    doc = sc.to_json(lambda p: "/device/" + p.name)
    assert doc["steps"][0] == {"op": "load_module", "module": "A", "pte": "/device/m.pte"}
    assert doc["steps"][1]["inputs"][0] == {"dtype": "float32", "shape": [1, 16], "file": "/device/in.bin"}
    assert doc["steps"][1]["atol"] == 0.01
    steps = parse_scenario(doc)
    assert [s.describe() for s in steps] == ["load_module(A)", "execute(A.forward)", "destroy_module(A)"]
    assert set(sc.files()) == {tmp_path / "m.pte", tmp_path / "in.bin", tmp_path / "out.bin"}


def test_builder_rejects_unknown_module_method_and_names(tmp_path):
    model = fake_model(tmp_path)
    sc = Scenario("s").load_module("A", model)
    with pytest.raises(ScenarioError, match="module 'B' is used before load_module"):
        sc.execute("B", "forward")
    with pytest.raises(ScenarioError, match="has no method 'decode'"):
        sc.load_method("A", "decode")
    with pytest.raises(ScenarioError, match="scenario name"):
        Scenario("bad name; rm -rf /")
    with pytest.raises(ScenarioError, match="module name"):
        sc.load_module("a b", model)


@pytest.mark.parametrize("doc, message", [
    ({}, "'steps' list"),
    ({"steps": [{"op": "explode"}]}, "'op' must be one of"),
    ({"steps": [{"op": "load_module", "module": "A"}]}, "missing pte"),
    ({"steps": [{"op": "execute", "module": "A"}]}, "missing method"),
])
def test_parse_errors(doc, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(doc)


def test_reference_model_predicts_contexts(tmp_path):
    qnn = fake_model(tmp_path, ("prefill", "decode"))
    xnn = fake_model(tmp_path, ("forward",), backend="xnnpack")
    sc = Scenario("s")
    sc.load_module("A", qnn).load_module("B", qnn).load_module("X", xnn)
    sc.load_method("A", "prefill").load_method("A", "decode").execute("B", "decode").execute("X", "forward")
    sc.unload_method("A", "prefill").unload_method("A", "decode").destroy_module("B").destroy_module("X")
    assert [e.contexts for e in predict(sc)] == [0, 0, 0, 1, 1, 2, 2, 2, 1, 0, 0]
    assert all(e.step_ok for e in predict(sc))
    bad = Scenario("b").load_module("A", qnn).unload_method("A", "prefill")
    assert [e.step_ok for e in predict(bad)] == [True, False]


# Parallel steps ------------------------------------------------------------------------------

def parallel_scenario(tmp_path):
    model = fake_model(tmp_path)
    other = fake_model(tmp_path, ("prefill", "decode"))
    sc = Scenario("s5").load_module("A", model).load_module("B", model)
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"))
    sc.parallel(("execute", "A", "forward"), ("load_module", "C", other), ("destroy_module", "B"))
    return sc


def test_parallel_builder_json_and_describe(tmp_path):
    sc = parallel_scenario(tmp_path)
    load, mixed = sc.steps[2], sc.steps[3]
    assert load.op == "parallel" and load.module is None and load.method is None
    assert [(s.op, s.module, s.method) for s in load.substeps] == [
        ("load_method", "A", "forward"), ("load_method", "B", "forward")]
    assert load.describe() == "parallel(load_method(A.forward) | load_method(B.forward))"
    assert mixed.describe() == "parallel(execute(A.forward) | load_module(C) | destroy_module(B))"
    assert mixed.modules == ("A", "C", "B") and sc.steps[0].modules == ("A",)
    assert sc.steps[0].substeps == () and sc.steps[0].flat == (sc.steps[0],)
    doc = sc.to_json(lambda p: "/device/" + p.name)
    assert doc["steps"][2] == {"op": "parallel", "steps": [
        {"op": "load_method", "module": "A", "method": "forward"},
        {"op": "load_method", "module": "B", "method": "forward"}]}
    execute, load_c, destroy = doc["steps"][3]["steps"]
    # An execute sub-step carries its tensors and tolerances exactly like a plain execute.
    plain = Scenario("p").load_module("A", fake_model(tmp_path)).execute("A", "forward")
    assert execute == plain.to_json(lambda p: "/device/" + p.name)["steps"][1]
    assert execute["inputs"][0]["file"] == "/device/in.bin" and execute["atol"] == 0.01
    assert load_c == {"op": "load_module", "module": "C", "pte": "/device/m.pte"}
    assert destroy == {"op": "destroy_module", "module": "B"}
    steps = parse_scenario(doc)
    assert [s.describe() for s in steps] == [s.describe() for s in sc.steps]
    assert steps[3].substeps[0].args["expected"][0]["shape"] == [1, 8]
    # JSON round trip through the runner's view keeps everything.
    assert parse_scenario(json.loads(json.dumps(doc)))[2].substeps == steps[2].substeps


def test_parallel_builder_rejects_bad_substeps(tmp_path):
    model = fake_model(tmp_path)
    sc = Scenario("s").load_module("A", model).load_module("B", model)
    with pytest.raises(ScenarioError, match="two sub-steps on module 'A'"):
        sc.parallel(("load_method", "A", "forward"), ("execute", "A", "forward"))
    with pytest.raises(ScenarioError, match="op must be one of"):
        sc.parallel(("snapshot", "A", None))
    with pytest.raises(ScenarioError, match="op must be one of"):
        sc.parallel(("parallel", "A", None))
    with pytest.raises(ScenarioError, match="needs a method"):
        sc.parallel(("load_method", "A", None))
    with pytest.raises(ScenarioError, match="has no method 'decode'"):
        sc.parallel(("execute", "B", "decode"))
    with pytest.raises(ScenarioError, match="destroy_module takes no method"):
        sc.parallel(("destroy_module", "A", "forward"))
    with pytest.raises(ScenarioError, match="module 'Z' is used before load_module"):
        sc.parallel(("load_method", "Z", "forward"))
    with pytest.raises(ScenarioError, match="at least one"):
        sc.parallel()
    with pytest.raises(ScenarioError, match="is a tuple"):
        sc.parallel("load_method A forward")
    with pytest.raises(ScenarioError, match="op must be one of"):
        sc.parallel(("load_module", "Q", model), ("snapshot", "B", None))
    assert len(sc.steps) == 2 and "Q" not in sc.models  # nothing half-added


@pytest.mark.parametrize("parallel, message", [
    ({"op": "parallel"}, "missing steps"),
    ({"op": "parallel", "steps": []}, "1 to 16 sub-steps"),
    ({"op": "parallel", "steps": [{"op": "destroy_module", "module": f"M{i}"} for i in range(17)]},
     "1 to 16 sub-steps"),
    ({"op": "parallel", "steps": {"op": "destroy_module", "module": "A"}}, "1 to 16 sub-steps"),
    ({"op": "parallel", "steps": [{"op": "load_method", "module": "A", "method": "forward"},
                                  {"op": "unload_method", "module": "A", "method": "forward"}]},
     "two sub-steps on module 'A'"),
    ({"op": "parallel", "steps": [{"op": "snapshot"}]}, r"sub-step 0: 'op' must be one of"),
    ({"op": "parallel", "steps": [{"op": "parallel", "steps": []}]}, "sub-step 0: 'op' must be one of"),
    ({"op": "parallel", "steps": [{"op": "destroy_module", "module": "A"},
                                  {"op": "execute", "module": "B"}]},
     r"step 0 sub-step 1 \(execute\): missing method"),
])
def test_parallel_parse_errors(parallel, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({"steps": [parallel]})


def test_reference_model_applies_parallel_substeps(tmp_path):
    qnn = fake_model(tmp_path)
    xnn = fake_model(tmp_path, backend="xnnpack")
    sc = Scenario("s").load_module("A", qnn).load_module("B", qnn)
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"), ("load_module", "X", xnn))
    sc.parallel(("execute", "A", "forward"), ("execute", "X", "forward"))
    sc.parallel(("destroy_module", "A"), ("unload_method", "B", "forward"), ("destroy_module", "X"))
    sc.parallel(("load_method", "B", "forward"), ("unload_method", "A", "forward"))  # A is gone
    predicted = predict(sc)
    assert [e.contexts for e in predicted] == [0, 0, 2, 2, 0, 1]
    assert [e.step_ok for e in predicted] == [True, True, True, True, True, False]
    assert predicted[2].loaded == {"A": {"forward"}, "B": {"forward"}, "X": frozenset()}


def fake_result(sc, contexts_after, creates_in_step=None):
    """A ScenarioResult whose QNN trace leaves `contexts_after[i]` live context handles after
    step i (each a list of handle values); `creates_in_step[i]` extra contexts are created and
    freed again inside step i."""
    from harness.qnn.trace import parse_trace
    from harness.protocol.output import RunOutput
    from harness.results.run import ScenarioResult

    lines, events, live = ["api core=2.40.0"], [], set()
    for i, handles in enumerate(contexts_after):
        for h in (creates_in_step or {}).get(i, []):
            lines += [f"context_create rc=0 handle={h}", f"context_free rc=0 handle={h}"]
        for h in sorted(set(handles) - live):
            lines.append(f"context_create rc=0 handle={h}")
        for h in sorted(live - set(handles)):
            lines.append(f"context_free rc=0 handle={h}")
        live = set(handles)
        text = "".join(f"{n + 1} {line}\n" for n, line in enumerate(lines))
        events.append({"event": "step", "index": i, "status": "ok", "error_code": 0,
                       "message": "", "outputs": [], "trace_offset": len(text.encode())})
    stdout = "".join("HARNESS_EVENT " + json.dumps(e) + "\n" for e in events + [{"event": "end"}])
    return ScenarioResult.build(sc, RunOutput(0, stdout, "", text), parse_trace(text))


def test_isolation_counts_contexts_of_a_parallel_load(tmp_path):
    from harness.results.assertions import assert_isolation, context_owners, owned_by

    model = fake_model(tmp_path)
    sc = Scenario("s5").load_module("A", model).load_module("B", model)
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"))
    sc.destroy_module("A").destroy_module("B")
    # A correct runtime: two contexts from the parallel load (a loser's candidate created and
    # freed inside the step is fine), each module's destroy frees one of them.
    good = fake_result(sc, [[], [], ["0x1", "0x2"], ["0x2"], []], {2: ["0x9"]})
    assert_isolation(good)
    owners = context_owners(good)
    assert set(owners.values()) == {"A|B"} and owned_by("A|B", "B") and not owned_by("A|B", "C")
    # Both modules on one cached context: the group is one context short.
    shared = fake_result(sc, [[], [], ["0x1"], ["0x1"], []])
    with pytest.raises(AssertionError, match=r"2 modules gained a loaded QNN method .* but 1 live "
                                             "QNN contexts are new"):
        assert_isolation(shared)
    with pytest.raises(AssertionError, match=r"module B has loaded methods but owns no live QNN "
                                             "context .*another module's cached context"):
        assert_isolation(shared)
    # The loser's candidate outlives the step: one context too many.
    leaked = fake_result(sc, [[], [], ["0x1", "0x2", "0x3"], ["0x2", "0x3"], ["0x3"]])
    with pytest.raises(AssertionError, match="outlived it"):
        assert_isolation(leaked)


def llm_shaped(tmp_path: Path) -> CompiledModel:
    """Methods as an LLM export has them: two delegated ones and metadata without a delegate
    (the first method in the program is a metadata method)."""
    model = fake_model(tmp_path, methods=("get_vocab_size", "prefill_forward", "kv_forward",
                                          "get_max_seq_len"))
    delegates = tuple({"method": m, "use_multi_contexts": False, "max_sf_buf_size": 0}
                      for m in ("prefill_forward", "kv_forward"))
    return dataclasses.replace(model, qnn_delegates=delegates)


def test_suites_choose_their_methods_from_the_program(tmp_path):
    from harness.scenario.library import first_method, method_pair, s1_two_modules, s4_cleanup_reload

    model = llm_shaped(tmp_path)
    assert first_method(model) == "prefill_forward"  # never a metadata method for S1
    assert method_pair(model) == ("prefill_forward", "kv_forward")
    assert {s.method for s in s1_two_modules(model).steps if s.method} == {"prefill_forward"}
    executed = [s.method for s in s4_cleanup_reload(model, 2).steps if s.op == "execute"]
    assert executed == ["prefill_forward", "get_vocab_size", "get_max_seq_len", "prefill_forward"]


def test_a_method_without_a_delegate_holds_no_context(tmp_path):
    model = llm_shaped(tmp_path)
    sc = Scenario("meta").load_module("A", model).execute("A", "get_vocab_size")
    sc.execute("A", "kv_forward").unload_method("A", "kv_forward").destroy_module("A")
    assert [e.contexts for e in predict(sc)] == [0, 0, 1, 0, 0]


def test_labels_name_steps_for_the_result_and_stay_host_side(tmp_path):
    from harness.protocol.output import RunOutput
    from harness.results.run import LiveCounts, ScenarioResult

    m = fake_model(tmp_path)
    sc = Scenario("lab").load_module("A", m).label("loaded").execute("A", "forward").label("ran")
    assert sc.labels == {"loaded": 0, "ran": 1}
    assert all("label" not in step for step in sc.to_json()["steps"])  # runners never see them
    with pytest.raises(ScenarioError, match="already step 0"):
        sc.label("loaded")
    with pytest.raises(ScenarioError, match="needs a step"):
        Scenario("empty").label("x")
    result = ScenarioResult.build(sc, RunOutput(0, "", ""), [])
    assert result.step("ran") is result.steps[1] and result.last is result.steps[1]
    with pytest.raises(KeyError, match=r"no step labelled 'nope' \(labels: loaded, ran\)"):
        result.step("nope")
    live = result.step("loaded").live
    assert isinstance(live, LiveCounts) and live.released and live == {"backend": 0, "context": 0,
                                                                        "device": 0}
    assert LiveCounts(context=2)["context"] == 2 and dict(LiveCounts(1, 2, 3)) == {
        "backend": 1, "context": 2, "device": 3}


def test_a_decode_loop_feeds_each_step_and_is_judged_by_its_own_step(tmp_path):
    """decode_loop: the first method once, then the decode method on its loop variants (eager's
    chain), each with the feed; the JSON carries the feed, and each step's expected outputs
    are that step's."""
    from harness.scenario.library import decode_loop

    def files(tag):
        return ((TensorFile("float32", (1, 16), tmp_path / f"{tag}_in.bin"),
                 TensorFile("float32", (1, 16), tmp_path / f"{tag}_state.bin")),
                (TensorFile("float32", (1, 16), tmp_path / f"{tag}_out.bin"),))
    decode = MethodReference(*files("ref"), variants=(files("v1"), files("loop0"), files("loop1")))
    prefill = MethodReference(*files("prefill"))
    model = CompiledModel("pd", "qnn", "SM8650", "fp16", tmp_path / "pd.pte",
                          {"prefill": prefill, "decode": decode}, 0.01, 0.01,
                          decode_loop={"after": "prefill", "method": "decode", "feed": [[1, 0]],
                                       "first_variant": 2, "steps": 2})
    sc = decode_loop(Scenario("loop").load_module("A", model), "A", model)
    steps = sc.to_json(lambda p: p.name)["steps"]
    assert [s.get("feed") for s in steps[1:]] == [None, [[1, 0]], [[1, 0]]]
    assert [s["expected"][0]["file"] for s in steps[1:]] == ["prefill_out.bin", "loop0_out.bin",
                                                            "loop1_out.bin"]
    assert steps[3]["inputs"][1]["file"] == "loop1_state.bin"  # dtype and shape of the fed input
    with pytest.raises(ScenarioError, match="has 2 steps, not 3"):
        decode_loop(Scenario("x").load_module("A", model), "A", model, steps=3)
    with pytest.raises(ScenarioError, match="no decode loop"):
        decode_loop(Scenario("y").load_module("A", fake_model(tmp_path)), "A", fake_model(tmp_path))


def test_an_execute_made_to_fail_does_not_advance_a_stateful_methods_count(tmp_path):
    # A failed execute must leave the method's state as it was: the next execute is judged as
    # the n-th that succeeded (the fault sweep makes executes fail on purpose).
    sc = Scenario("s").load_module("A", fake_model(tmp_path)).execute("A", "forward")
    sc.execute("A", "forward").execute("A", "forward")
    assert [o for (o,) in sc.ordinals()] == [None, 1, 2, 3]
    sc.failed_executes.add(2)
    assert [o for (o,) in sc.ordinals()] == [None, 1, None, 2]
@pytest.mark.unit
def test_a_replayed_execute_keeps_its_own_inputs(tmp_path):
    """Executes of one method on other inputs (a decode loop's steps, each its own mask and
    position) replay each on its own files, with its own expected outputs and its `decode`."""
    import json

    from harness.replay import load_run

    (tmp_path / "p.pte").write_bytes(b"x")
    for name in ("a", "b", "ea", "eb"):
        (tmp_path / f"{name}.bin").write_bytes(bytes(4))

    def execute(inp: str, exp: str, **extra) -> dict:
        return {"op": "execute", "module": "A", "method": "kv_forward",
                "inputs": [{"dtype": "int32", "shape": [1, 1], "file": f"{inp}.bin"}],
                "expected": [{"dtype": "int32", "shape": [1], "file": f"{exp}.bin"}], **extra}

    decode = {"token": [0, 0, 0, 1], "past": 0, "new": 1, "caches": []}
    doc = {"version": 1, "name": "loop", "steps": [
        {"op": "load_module", "module": "A", "pte": "p.pte"}, execute("a", "ea"),
        execute("b", "eb", decode=decode), execute("b", "eb", decode=decode),
        {"op": "destroy_module", "module": "A"}]}
    (tmp_path / "scenario.json").write_text(json.dumps(doc))
    (tmp_path / "replay.json").write_text(json.dumps({"models": {"A": {"backend": "qnn"}}}))
    sc = load_run(tmp_path).scenario
    assert [s.variant for s in sc.steps] == [0, 0, 1, 1, 0]
    steps = sc.to_json()["steps"]
    assert [Path(s["inputs"][0]["file"]).name for s in steps[1:4]] == ["a.bin", "b.bin", "b.bin"]
    assert [Path(s["expected"][0]["file"]).name for s in steps[1:4]] == ["ea.bin", "eb.bin",
                                                                          "eb.bin"]
    assert steps[2]["decode"] == decode


@pytest.mark.unit
def test_an_llm_exports_loop_steps_carry_decode_and_its_error_is_the_tests_error(tmp_path):
    """An LLM export's loop (harness.drive.llm_loop): the prompt's variant first, then each
    step's `decode` in the JSON; an export the loop cannot drive says why when a test builds
    its loop, and unmet_needs says a program without one lacks it."""
    import dataclasses

    from harness.programs.params import unmet_needs
    from harness.protocol.scenario_file import DecodeSpec
    from harness.scenario.library import decode_loop

    tok = TensorFile("int32", (1, 1), tmp_path / "tok.bin")
    ref = MethodReference((tok,), (), variants=(((tok,), ()), ((tok,), ())))
    spec = DecodeSpec(0, 0, 3, 64, 0, 4)
    model = dataclasses.replace(fake_model(tmp_path, ("prefill_forward", "kv_forward")),
                                methods={"prefill_forward": ref, "kv_forward": ref},
                                decode_loop={"after": "prefill_forward", "after_variant": 1,
                                             "method": "kv_forward", "first_variant": 2,
                                             "steps": 1, "decode": [spec]})
    steps = decode_loop(Scenario("l").load_module("A", model), "A", model).to_json()["steps"]
    assert [(s["method"], s.get("decode")) for s in steps[1:]] == [
        ("prefill_forward", None), ("kv_forward", spec.to_json())]
    broken = dataclasses.replace(model, decode_loop={"error": "its kv_forward takes 2 tokens"})
    with pytest.raises(ScenarioError, match="program m: its kv_forward takes 2 tokens"):
        decode_loop(Scenario("b").load_module("A", broken), "A", broken)
    assert unmet_needs(broken, ("decode_loop",)) == ""  # an error to report, not a skip
    none = dataclasses.replace(model, decode_loop={})
    assert "lacks a decode loop" in unmet_needs(none, ("decode_loop",))
