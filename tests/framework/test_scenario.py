"""Scenario building, JSON form and parsing, and the reference model's predictions."""

from pathlib import Path

import pytest

from harness.compile import CompiledModel, MethodReference
from harness.reference import predict
from harness.scenario import Scenario, ScenarioError, parse_scenario
from harness.tensors import TensorFile


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
