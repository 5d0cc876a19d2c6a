"""The fault sweep's plan, without a device: which calls a recorded trace gives, the sample CI
runs, and which steps of an injected run may report errors (harness.drive.fault_sweep)."""

import json

from harness.drive import fault_sweep
from harness.drive.fault_sweep import CallSite
from harness.protocol.output import RunOutput
from harness.qnn.trace import parse_trace
from harness.results.run import ScenarioResult
from harness.scenario import Scenario
from tests.framework.test_scenario import fake_model

TRACE_BY_STEP = [
    [],  # load_module A
    ["api core=2.40.0", "log_create rc=0 handle=0x1 level=1", "backend_create rc=0 handle=0x1",
     "device_create rc=0 handle=0x1", "context_create rc=0 handle=0x1 binary=10",
     "graph_retrieve rc=0 handle=0x1 context=0x1 name=forward"],  # load_method A
    ["graph_execute rc=0 graph=0x1"],  # execute A
    [],  # load_module W
    ["graph_execute rc=0 graph=0x1"],  # execute W (on the same graph: only the count matters)
    ["context_free rc=0 handle=0x1", "device_free rc=0 handle=0x1",
     "backend_free rc=0 handle=0x1", "log_free rc=0 handle=0x1"],  # destroy A
]


def recorded(tmp_path):
    model = fake_model(tmp_path)
    sc = Scenario("plan").load_module("A", model).load_method("A", "forward")
    sc.execute("A", "forward").load_module("W", model).execute("W", "forward")
    sc.destroy_module("A")
    lines, events = [], []
    for i, step_lines in enumerate(TRACE_BY_STEP):
        lines += step_lines
        text = "".join(f"{n + 1} {line}\n" for n, line in enumerate(lines))
        events.append({"event": "step", "index": i, "status": "ok", "error_code": 0,
                       "message": "", "outputs": [], "trace_offset": len(text.encode())})
    stdout = "".join("HARNESS_EVENT " + json.dumps(e) + "\n" for e in events + [{"event": "end"}])
    return sc, ScenarioResult.build(sc, RunOutput(0, stdout, "", text), parse_trace(text))


def test_call_sites_name_the_function_its_occurrence_and_step(tmp_path):
    sc, result = recorded(tmp_path)
    sites = fault_sweep.call_sites(result, len(sc.steps))
    assert [s.describe() for s in sites] == [
        "QnnInterface_getProviders#1 (step 1)", "QnnLog_create#1 (step 1)",
        "QnnBackend_create#1 (step 1)", "QnnDevice_create#1 (step 1)",
        "QnnContext_createFromBinary#1 (step 1)", "QnnGraph_retrieve#1 (step 1)",
        "QnnGraph_execute#1 (step 2)", "QnnGraph_execute#2 (step 4)",
        "QnnContext_free#1 (step 5)", "QnnDevice_free#1 (step 5)", "QnnBackend_free#1 (step 5)",
        "QnnLog_free#1 (step 5)"]
    # Calls past the scenario's own steps (its reload) are not swept.
    assert [s.api for s in fault_sweep.call_sites(result, 2)][-1] == "QnnGraph_retrieve"


def test_the_sample_keeps_each_functions_first_call_in_order():
    sites = [CallSite("QnnGraph_execute", n, n) for n in range(1, 9)] + \
        [CallSite("QnnContext_free", 1, 9)]
    chosen = fault_sweep.sample(sites, 4, seed=1)
    assert len(chosen) == 4 and chosen == sorted(chosen, key=sites.index)
    assert {CallSite("QnnGraph_execute", 1, 1), CallSite("QnnContext_free", 1, 9)} <= set(chosen)
    assert fault_sweep.sample(sites, 0) == sites


def test_an_injected_run_allows_errors_on_the_failing_module_only(tmp_path):
    sc, _ = recorded(tmp_path)
    run = fault_sweep.injected(sc, CallSite("QnnGraph_execute", 1, 2), len(sc.steps))
    assert run.qnn_nemesis == ["fail QnnGraph_execute#1 rc=6001"]
    assert run.allowed_errors == {2, 5}  # A's execute and destroy; W's steps must stay ok
    assert sc.qnn_nemesis == [] and not sc.allowed_errors  # the recorded scenario is untouched
