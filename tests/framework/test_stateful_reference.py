"""A stateful method's reference: the n-th execute since its Module loaded it is judged against
the reference's n-th (a new load, a destroy or an unload starts the count again), failure
messages name the reference used, and --etrecord input is checked."""

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.plugin.options import _etrecords
from harness.programs.compile import CompiledModel, MethodReference
from harness.protocol.tensors import TensorFile
from harness.protocol.scenario_file import ScenarioError
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
