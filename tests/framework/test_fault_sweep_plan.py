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


def test_every_traced_call_is_a_site_and_a_probe_with_its_open_is_one_attempt(tmp_path):
    """Beside the calls traced by kind, the interposer's `call api=...` lines (every other
    entry of the function table) and the dlopen shim's lines are call sites; an open that
    follows a probe (RTLD_NOLOAD) that found nothing is the same attempt, not another site."""
    sc, _ = recorded(tmp_path)
    extra = ["dlopen lib=libQnnHtp.so rc=1 noload=1", "dlopen lib=libQnnHtp.so rc=0 after_probe=1",
             "api core=2.40.0", "call api=QnnDevice_getInfrastructure rc=0",
             "call api=QnnBackend_getApiVersion rc=0", "dlopen lib=libQnnSystem.so rc=0 noload=0",
             "call api=QnnSystemInterface_getProviders rc=0",
             "context_create rc=0 handle=0x1 binary=10"]
    text = "".join(f"{n + 1} {line}\n" for n, line in enumerate(extra))
    events = [{"event": "step", "index": i, "status": "ok", "error_code": 0, "message": "",
               "outputs": [], "trace_offset": 0 if i == 0 else len(text.encode())}
              for i in range(len(sc.steps))]
    stdout = "".join("HARNESS_EVENT " + json.dumps(e) + "\n" for e in events + [{"event": "end"}])
    result = ScenarioResult.build(sc, RunOutput(0, stdout, "", text), parse_trace(text))
    assert [s.api for s in fault_sweep.call_sites(result, len(sc.steps))] == [
        "dlopen.libQnnHtp.so", "QnnInterface_getProviders", "QnnDevice_getInfrastructure",
        "QnnBackend_getApiVersion", "dlopen.libQnnSystem.so", "QnnSystemInterface_getProviders",
        "QnnContext_createFromBinary"]


def test_an_injected_run_of_a_scenario_meeting_a_known_bug_allows_its_failing_steps(tmp_path):
    """S1 and S3 fail a step with nothing injected on 1.5.1 (the delegate cache): an injected
    run may fail it too, and is judged on the failure path only."""
    sc, _ = recorded(tmp_path)
    run = fault_sweep.injected(sc, CallSite("QnnGraph_execute", 1, 2), len(sc.steps), {4})
    assert run.allowed_errors == {2, 4, 5}


def test_every_function_table_entry_and_dlopen_point_is_a_rule_target():
    from harness.protocol.nemesis import DLOPEN_POINTS, QNN_APIS, QNN_TABLE, parse_rule

    assert len(QNN_TABLE) == 69 and QNN_TABLE[13] == "QnnContext_createFromBinary"
    assert QNN_TABLE[40] == "QnnDevice_create" and QNN_TABLE[21] == "QnnGraph_execute"
    assert "QnnGraph_addNode" not in QNN_APIS and "QnnDevice_getInfrastructure" in QNN_APIS
    for api in ("QnnBackend_getApiVersion", *DLOPEN_POINTS):
        assert str(parse_rule(f"fail {api}#2 rc=1100")) == f"fail {api}#2 rc=1100"
    # The interposer takes its names from the same tables: api_names.h, generated from them
    # and included by harness/qnn/interposer.c (whose build keys cover it).
    from harness.qnn import api_names, interposer_build

    assert api_names.HEADER.read_text() == api_names.header_text(), (
        "harness/qnn/api_names.h is stale: run `python -m harness.qnn.api_names`")
    source = interposer_build.SOURCE.read_text()
    assert '#include "api_names.h"' in source and "{HARNESS_API_NAMES}" in source
    assert api_names.HEADER in interposer_build.SOURCES
    for name in (*QNN_TABLE, *DLOPEN_POINTS, "QnnSystemContext_free", "step.execute"):
        assert f'  "{name}"' in api_names.header_text()
    # libQnnSystem.so's entry point, which the shim answers for the runtime's handle: the last
    # name, at the index interposer.c wraps it by
    assert api_names.header_text().rstrip().split("\n")[-3] == '  "QnnSystemInterface_getProviders"'
    assert "API_SYSTEM_PROVIDERS = API_SYSTEM_FIRST + HARNESS_SYSTEM_COUNT" in source
    assert "QnnSystemInterface_getProviders" in QNN_APIS
