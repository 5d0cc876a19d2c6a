"""harness/protocol/ on its own: exit codes, the wire format, scenario validation, typed
events, and that it stays cheap to import. Both runners against it: test_protocol_conformance.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.protocol import events as protocol_events
from harness.protocol import scenario_file, wire
from harness.protocol.wire import EVENT_PREFIX, STEP_MARKER, ExitCode
from harness.protocol.events import EndEvent, EventError, StartEvent, StepEvent, parse_event
from harness.protocol.scenario_file import ScenarioError
from harness.protocol.scenario_check import load_scenario, validate_scenario

MEMORY = {"rollup": {"Rss": 1000, "Anonymous": 400}, "mappings": {"/abs/x.pte": {"Rss": 0}},
          "dmabuf": {"count": 0, "bytes": 0}}


def step_event(**changes) -> dict:
    event = {"event": "step", "index": 0, "op": "execute", "module": "A", "method": "forward",
             "status": "ok", "error_code": 0, "message": "", "elapsed_ms": 3.2,
             "outputs": [{"dtype": "float32", "shape": [1, 8], "sha256": "ab" * 32}],
             "max_abs_diff": 0.0, "option": None, "trace_offset": 812, "memory": MEMORY}
    event.update(changes)
    return event


# Exit codes and the wire ---------------------------------------------------------------------

def test_exit_codes_have_their_values_and_docs():
    assert [int(c) for c in ExitCode] == [0, 1, 2]
    assert ExitCode.BAD_SCENARIO == 2 and "before the first step" in ExitCode.BAD_SCENARIO.__doc__
    assert all(c.__doc__ for c in ExitCode)
    assert ExitCode.of(1) is ExitCode.STEP_FAILED
    assert [ExitCode.of(rc) for rc in (None, -11, 3, 139)] == [None] * 4


def test_events_and_markers_on_the_wire():
    line = wire.format_event({"event": "end", "status": "ok", "steps": 0, "failed_steps": 0})
    assert line.startswith(EVENT_PREFIX) and "\n" not in line
    stdout = "\n".join(["runtime log", line, EVENT_PREFIX + '{"event": "st', line])
    assert wire.read_events(stdout) == [json.loads(line[len(EVENT_PREFIX):])] * 2
    assert wire.format_step_marker(3) == STEP_MARKER + "3"
    assert wire.step_marker_index("HARNESS_STEP -1") == wire.TEARDOWN_INDEX
    assert wire.step_marker_index("HARNESS_STEP 2 execute") == 2
    assert wire.step_marker_index("HARNESS_STEP x") is None
    assert wire.step_marker_index("other") is None
    assert wire.is_protocol_line(line) and not wire.is_protocol_line("I log")


def test_cheap_to_import():
    """Runners are a fresh process per scenario: no torch, executorch, numpy or pydantic at
    import time, for the protocol and for the Python runner's module (which imports torch only
    once the scenario is valid)."""
    code = ("import sys, harness.protocol.wire, harness.protocol.scenario_file, "
            "harness.protocol.scenario_check, harness.protocol.events, harness.protocol.output, "
            "harness.protocol.memory, harness.protocol.tensors, harness.protocol.values, "
            "harness.runner.python_runner; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'executorch', 'numpy', 'pydantic', 'yaml'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).parents[2])
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


# Scenario validation -------------------------------------------------------------------------

def test_a_valid_scenario_is_typed():
    doc = {"version": 1, "name": None, "comment": "kept out", "steps": [
        {"op": "load_module", "module": "A", "pte": "m.pte", "method": "ignored",
         "backend_options": {"XnnpackBackend": {"weight_cache_enabled": True, "n": 2}}},
        {"op": "execute", "module": "A", "method": "forward", "atol": None, "emit_outputs": True,
         "inputs": [{"dtype": "float16", "shape": [2, 3], "file": "in.bin"}], "note": 1},
        {"op": "snapshot", "module": "A"},
        {"op": "get_option", "backend": "B", "key": "k", "type": None},
        {"op": "parallel", "steps": [{"op": "destroy_module", "module": "A"},
                                     {"op": "load_module", "module": "B", "pte": "m.pte"}]}]}
    sc = validate_scenario(doc)
    load, execute, snapshot, get, par = sc.steps
    assert sc.name == "" and sc.watch_mappings == () and sc.version == scenario_file.SCENARIO_VERSION
    assert (load.module, load.method, load.pte) == ("A", None, "m.pte")
    assert load.backend_options == {"XnnpackBackend": {"weight_cache_enabled": True, "n": 2}}
    assert execute.inputs[0] == scenario_file.TensorSpec("float16", (2, 3), "in.bin")
    assert execute.inputs[0].nbytes == 12 and execute.atol == 0.0 and execute.emit_outputs
    assert execute.extra == {"note": 1}
    assert (snapshot.module, snapshot.extra) == (None, {"module": "A"})
    assert get.type == "int"
    assert [(s.op, s.module) for s in par.steps] == [("destroy_module", "A"), ("load_module", "B")]
    assert sc.files() == ["m.pte", "in.bin"]


@pytest.mark.parametrize("doc, message", [
    ([], "an object with a 'steps' list"),
    ({"version": 2, "steps": []}, r"unsupported scenario version 2 \(this runner reads 1\)"),
    ({"version": True, "steps": []}, "unsupported scenario version True"),
    ({"name": 1, "steps": []}, "field 'name' must be a string"),
    ({"watch_mappings": [""], "steps": []}, "'watch_mappings' must be an array of paths"),
    ({"steps": [{"op": "load_module", "module": "", "pte": "m"}]},
     r"step 0 \(load_module\): field 'module' must be a non-empty string"),
    ({"steps": [{"op": "destroy_module", "module": None}]}, "missing module"),
    ({"steps": [{"op": "execute", "module": "A", "method": "f",
                 "inputs": [{"dtype": "f4", "shape": [1], "file": "x"}]}]},
     r"step 0 \(execute\): inputs\[0\]: unknown dtype 'f4'"),
    ({"steps": [{"op": "execute", "module": "A", "method": "f",
                 "expected": [{"dtype": "int8", "shape": [2**31], "file": "x"}]}]},
     r"expected\[0\]: shape entries must be non-negative integers"),
    ({"steps": [{"op": "execute", "module": "A", "method": "f", "rtol": -1}]},
     "field 'rtol' must be a number >= 0"),
    ({"steps": [{"op": "set_option", "backend": "B", "key": "k", "value": 2**31}]},
     "integer option value out of int range"),
    ({"steps": [{"op": "load_module", "module": "A", "pte": "m",
                 "backend_options": {"B": {"k": "é" * 128}}}]},  # 256 bytes in UTF-8
     "string option value longer than 255"),
    ({"steps": [{"op": "get_option", "backend": "B", "key": "k", "type": "float"}]},
     "field 'type' must be int, bool or string"),
])
def test_invalid_scenarios_name_the_step_and_field(doc, message):
    with pytest.raises(ScenarioError, match=message):
        validate_scenario(doc)


def test_load_scenario_checks_json_files_and_sizes(tmp_path):
    (tmp_path / "m.pte").write_bytes(b"x")
    (tmp_path / "in.bin").write_bytes(bytes(6))
    execute = {"op": "execute", "module": "A", "method": "f",
               "inputs": [{"dtype": "float32", "shape": [1, 2], "file": "in.bin"}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"steps": [{"op": "load_module", "module": "A", "pte": "m.pte"},
                                          execute]}))
    with pytest.raises(ScenarioError, match=r"s.json: step 1 \(execute\): inputs\[0\]: tensor "
                                            "file in.bin has 6 bytes, shape and dtype need 8"):
        load_scenario(path)
    (tmp_path / "in.bin").write_bytes(bytes(8))
    sc = load_scenario(path)
    assert sc.base == tmp_path and sc.path("in.bin") == tmp_path / "in.bin"
    (tmp_path / "m.pte").unlink()
    with pytest.raises(ScenarioError, match=r"s.json names missing files: m.pte"):
        load_scenario(path)
    path.write_text('{"steps": [], "x": NaN}')
    with pytest.raises(ScenarioError, match=r"cannot read scenario .*NaN is not JSON"):
        load_scenario(path)
    with pytest.raises(ScenarioError, match=r"cannot read scenario .*nowhere.json"):
        load_scenario(tmp_path / "nowhere.json")


def test_the_builder_writes_only_valid_scenarios(tmp_path):
    from harness.programs.compile import CompiledModel, MethodReference
    from harness.scenario import Scenario

    model = CompiledModel("m", "xnnpack", "SM8650", "fp32", tmp_path / "m.pte",
                          {"forward": MethodReference((), ())}, 0.0, 0.0)
    sc = Scenario("s").load_module("A", model, backend_options={"XnnpackBackend": {"k": 0.5}})
    with pytest.raises(ScenarioError, match="option values must be bool, int or string"):
        sc.to_json()


# Typed events --------------------------------------------------------------------------------

def test_events_parse_to_their_types():
    start = parse_event(EVENT_PREFIX + '{"event": "start", "runner": "native", "pid": 7, '
                                       '"scenario": "s"}')
    assert start == StartEvent("start", "native", 7, "s")
    step = parse_event(step_event(elapsed_ms=3))  # an integer is a number
    assert isinstance(step, StepEvent) and step.elapsed_ms == 3.0 and step.substeps is None
    assert step.outputs[0].shape == [1, 8] and step.outputs[0].data is None
    assert step.memory.rollup["Rss"] == 1000 and step.memory.dmabuf.count == 0
    option = parse_event(step_event(op="get_option", module=None, method=None, status="error",
                                    error_code=-1, outputs=[], max_abs_diff=None,
                                    option={"backend": "B", "key": "k", "value": None,
                                            "supported": False}))
    assert option.option.supported is False
    sub = {"op": "execute", "module": "A", "method": "forward", "status": "mismatch",
           "error_code": 0, "message": "", "outputs": [], "max_abs_diff": 1.5, "elapsed_ms": 1.0}
    par = parse_event(step_event(op="parallel", module=None, method=None, substeps=[sub]))
    assert par.substeps[0].max_abs_diff == 1.5
    end = parse_event({"event": "end", "status": "failed", "steps": 3, "failed_steps": 1})
    assert end == EndEvent("end", "failed", 3, 1)


@pytest.mark.parametrize("event, message", [
    ({"event": "begin"}, "field 'event' must be one of start, step, end, got 'begin'"),
    ("not json", "event is not JSON"),
    ({"event": "start", "runner": "native", "pid": "7", "scenario": "s"},
     "start event: field 'pid' must be an integer, got string '7'"),
    ({"event": "end", "status": "ok", "steps": 1}, "end event: missing field 'failed_steps'"),
    ({"event": "end", "status": "done", "steps": 1, "failed_steps": 0},
     "end event: field 'status' must be 'ok' or 'failed'"),
    (step_event(memory={**MEMORY, "rollup": {"Rss": "1000"}}),
     "step event: field 'memory.rollup.Rss' must be an integer, got string '1000'"),
    (step_event(outputs=[{"dtype": "float32", "shape": [1, 8.5], "sha256": "x"}]),
     r"field 'outputs\[0\].shape\[1\]' must be an integer"),
    (step_event(status="fine"), "field 'status' must be 'ok' or 'error' or 'mismatch'"),
    (step_event(error_code=True), "field 'error_code' must be an integer, got bool"),
    (step_event(module=3), "field 'module' must be a string or null"),
    (step_event(extra=1), "step event: unknown field 'extra'"),
    (step_event(option={"backend": "B", "key": "k", "value": [], "supported": True}),
     "field 'option.value' must be"),
    (step_event(op="explode"), "field 'op' must be one of"),
    (step_event(index=-1), "field 'index' must be >= 0"),
    (step_event(substeps=[]), "'substeps' must be given for a parallel step and only for it"),
    (step_event(op="parallel"), "'substeps' must be given for a parallel step and only for it"),
])
def test_a_bad_event_names_its_field(event, message):
    with pytest.raises(EventError, match=message):
        parse_event(event)


# The Python runner keeps the protocol when a step raises --------------------------------------

def test_python_runner_reports_a_raising_step_and_goes_on(tmp_path, capfd):
    """A step that raises inside the Python runner (not a runtime error) is that step's error,
    with HARNESS_ERROR_CODE; the run goes on and ends with its end event (exit 1). It used to die
    with an uncaught exception (exit 1, no end) that the assertions read as a finished run."""
    from harness.runner import python_runner

    sc = validate_scenario({"name": "raises", "steps": [
        {"op": "snapshot"}, {"op": "destroy_module", "module": "A"}, {"op": "snapshot"}]},
        tmp_path)
    runner = object.__new__(python_runner.Runner)  # no runtime: no step reaches it
    runner.scenario, runner.modules, runner.methods = sc, {}, {}
    runner.watch, runner.trace = [], None

    def snapshot(step):
        raise ValueError("cannot reshape array of size 1 into shape (1,16)")

    runner.snapshot = snapshot
    assert runner.run() == ExitCode.STEP_FAILED
    out, err = capfd.readouterr()
    events = protocol_events.parse_events(out)
    assert [type(e) for e in events] == [StartEvent, StepEvent, StepEvent, StepEvent, EndEvent]
    first, destroy = events[1], events[2]
    assert first.status == "error" and first.error_code == protocol_events.HARNESS_ERROR_CODE
    assert first.message == ("runner error: ValueError: cannot reshape array of size 1 into "
                             "shape (1,16)")
    assert destroy.message == "module A is not loaded"
    assert events[-1] == EndEvent("end", "failed", 3, 3)
    assert [wire.step_marker_index(line) for line in err.splitlines()] == [0, 1, 2, -1]


def test_exports_name_every_protocol_dtype():
    """The C++ export maps each tensor dtype a scenario may hold to its ScalarType."""
    from harness.export.cpp import DTYPES as CPP_DTYPES
    from harness.protocol.scenario_file import DTYPES

    assert set(CPP_DTYPES) == set(DTYPES)


# Non-tensor values ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind, shape, value", [
    ("int", [], -2), ("int", [3], [1, -2, 2**62]), ("float", [], 0.25), ("float", [2], [0.5, -1.0]),
    ("boolean", [], True), ("boolean", [2], [True, False]), ("string", [], "uint8 ü"), ("none", [], None),
])
def test_a_value_reads_back_from_its_bytes(kind, shape, value):
    from harness.protocol.values import compare_value, read_value, value_bytes

    raw = value_bytes(kind, value)
    assert read_value(kind, shape, raw) == value
    assert compare_value(kind, value, kind, value, 0.0, 0.0) == ("", 0.0)


def test_values_compare_a_double_within_tolerance_and_the_rest_exactly():
    from harness.protocol.values import compare_value

    assert compare_value("float", 0.25, "float", 0.2500001, 1e-6, 0.0)[0] == ""
    assert compare_value("float", 0.25, "float", 0.2500001, 0.0, 0.0)[0] == \
        "is 0.25, expected 0.2500001"
    assert compare_value("float", float("nan"), "float", float("nan"), 1.0, 1.0)[0]
    assert compare_value("int", 2**62, "int", 2**62 + 1, 10.0, 10.0)[0]  # exact, not float
    assert compare_value("string", "a", "string", "b", 1.0, 1.0)[0] == 'is "a", expected "b"'
    assert compare_value("int", 1, "string", "1", 0.0, 0.0)[0] == \
        "is an int (1), expected a string"
    assert compare_value("int", [1, 2], "int", [1], 0.0, 0.0)[0]


def test_a_value_event_is_checked_against_its_kind():
    step = step_event()
    step["outputs"] = [{"dtype": "string", "shape": [], "sha256": "x", "value": "uint8"},
                       {"dtype": "float", "shape": [], "sha256": "x", "value": None},
                       {"dtype": "int", "shape": [2], "sha256": "x", "value": [1, 2]}]
    event = parse_event(step)
    assert [o.value for o in event.outputs] == ["uint8", None, [1, 2]]
    for kind, shape, value in (("int", [], "7"), ("float32", [], 1.0), ("int", [], [1])):
        step["outputs"] = [{"dtype": kind, "shape": shape, "sha256": "x", "value": value}]
        with pytest.raises(EventError) as err:
            parse_event(step)
        assert err.value.path == "outputs[0].value"


def test_the_python_runner_names_an_output_it_cannot_describe():
    from harness.protocol.scenario_file import ScenarioStep
    from harness.runner.python_runner import UndescribableOutput, undescribable, value_output

    out = value_output([1, 2], emit_data=True)
    assert (out["dtype"], out["shape"], out["value"], out["data"]) == (
        "int", [2], [1, 2], "AQAAAAAAAAACAAAAAAAAAA==")
    with pytest.raises(UndescribableOutput) as err:
        value_output([object()], emit_data=False)
    words = undescribable(ScenarioStep("execute", "M", "get_caches"), 3, str(err.value))
    assert words.startswith("method 'get_caches' output 3 is a list of object, which the "
                            "runner cannot describe")
