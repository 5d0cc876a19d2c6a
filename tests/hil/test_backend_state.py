"""Process-wide QNN backend state: programs with different QNN log levels, and programs built
for two SoCs, live in one process.

The runtime caches one backend bundle (library, logger, backend, device) per backend type for the
whole process. A program whose log level differs from the bundle's gets a new logger in the
cached bundle (QnnBackendUnifiedRegistry); the old logger's destructor frees its QNN log handle,
which the live backend and device were created with. The interposer traces `log_create`,
`log_free` and the log handle of every backend and device create, and the trace replay calls a
log handle freed while a backend or device created with it lives a violation (assert_isolation
reports it). Both orders of the two levels; the control is two programs of the same level.
The bundle's device is built from the first program's SoC and HTP options; the trace's
device_create names the SoC each device was created for, so a program built for another SoC
whose context lands on that device is seen.
"""

import pytest

from harness.results.assertions import (assert_isolation, assert_live_counts,
                                        assert_outputs_consistent, assert_steps_ok, check_failed)
from harness.scenario import Scenario

DEBUG = {"debug_log": True}


def both_live(first, second, name):
    """A loads and executes, B loads and executes while A lives, A executes again, then each
    is destroyed with the other executing in between."""
    sc = Scenario(name).load_module("A", first).execute("A", "forward")
    sc.load_module("B", second).execute("B", "forward").execute("A", "forward")
    sc.destroy_module("A").execute("B", "forward").destroy_module("B")
    return sc


@pytest.mark.parametrize("order", ["error_then_debug", "debug_then_error"])
def test_two_log_levels_in_one_process(hil_session, scenario_driver, order):
    error = hil_session.model("linear_relu", "fp16")
    debug = hil_session.model("mlp_tanh", "fp16", DEBUG)
    first, second = (error, debug) if order == "error_then_debug" else (debug, error)
    result = scenario_driver.run(both_live(first, second, f"log_levels_{order}"))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)


def test_control_two_programs_of_one_log_level(hil_session, scenario_driver):
    first = hil_session.model("linear_relu", "fp16")
    second = hil_session.model("mlp_tanh", "fp16")
    result = scenario_driver.run(both_live(first, second, "log_levels_same"))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)


def device_socs(result) -> list[tuple[str, int, int | None]]:
    """(module, the SoC model its program was compiled for, the SoC model of the device its
    context was created on) for every context the run created, from the trace: each
    device_create names the SoC the runtime asked for (`soc=`, QcomChipset), each
    context_create its device."""
    devices: dict[str, int] = {}
    out = []
    for i, step in enumerate(result.steps):
        for rec in result.trace_during(i):
            if rec.rc != 0:
                continue
            if rec.kind == "device_create":
                devices[rec.fields["handle"]] = int(rec.fields.get("soc", "-1"))
            elif rec.kind == "context_create" and step.step.module:
                model = result.scenario.models[step.step.module]
                wanted = {d.get("soc_model") for d in model.qnn_delegates} - {None}
                out.append((step.step.module, wanted.pop() if len(wanted) == 1 else -1,
                            devices.get(rec.fields.get("device", ""))))
    return out


@pytest.mark.parametrize("order", ["SM8650_then_SM8750", "SM8750_then_SM8650"])
def test_programs_for_two_socs_in_one_process(hil_session, scenario_driver, order):
    """An app carrying builds for two SoCs loads both: each program's context must live on a
    QNN device created with the SoC its program was compiled for (the runtime reads it from the
    program's compile spec), whichever loaded first."""
    socs = order.split("_then_")
    first = hil_session.model("linear_relu", "fp16", soc=socs[0])
    second = hil_session.model("mlp_tanh", "fp16", soc=socs[1])
    result = scenario_driver.run(both_live(first, second, f"two_socs_{order}"))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    placed = device_socs(result)
    assert placed, f"no context_create in the trace:\n{result.summary()}"
    wrong = [f"{module} (compiled for QcomChipset {want}) got a context on a device created "
             f"for QcomChipset {got}" for module, want, got in placed if want != got]
    if wrong:
        raise check_failed(result, f"scenario {result.scenario.name}: " + "; ".join(wrong) +
                           "\ndevice_create / context_create trace:\n" + "\n".join(
                               f"  {r.seq} {r.kind} {r.fields}" for r in result.trace
                               if r.kind in ("device_create", "context_create")),
                           "a program's context lives on a device created for another SoC")
