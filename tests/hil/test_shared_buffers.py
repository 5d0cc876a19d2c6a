"""Shared buffers: a program compiled with `shared_buffer=True`, its inputs placed in QNN shared
memory as an app places them (QnnExecuTorchAllocCustomMem, QnnExecuTorchAddCustomMemTensorAddr:
`execute(..., shared_inputs=True)`), so the HTP reads them without a copy and the delegate
registers them with QnnMem_register. Every execute must give the eager outputs, across a
destroy + reload, and every registration must be undone by the end (the interposer traces
`mem_register` / `mem_deregister` with their counts).

The shared memory is rpcmem from libcdsprpc.so (fastrpc), which phones have and an x86_64
host has not: there the allocation fails, and the verdict is how the runtime fails (a null
buffer and its own log line, or a crash with its signal). The same program with its inputs on
the heap is the control. Native runner only (the pybindings cannot place inputs there).
"""

import pytest

from harness.results.assertions import (assert_outputs_consistent, assert_steps_ok,
                                        check_failed)
from harness.scenario import Scenario

SHARED = {"shared_buffer": True}


@pytest.fixture(autouse=True)
def _native_runner(hil_session):
    if hil_session.device_runner == "python":
        pytest.skip("the executorch pybindings cannot place inputs in QNN shared memory: run "
                    "with --runner native")


def cycles(model, name, shared):
    sc = Scenario(name)
    for _ in range(2):
        sc.load_module("A", model)
        sc.execute("A", "forward", shared_inputs=shared).execute("A", "forward",
                                                                  shared_inputs=shared)
        sc.destroy_module("A")
    return sc


def registrations(result) -> tuple[int, int]:
    """(handles registered, handles deregistered), successful calls only."""
    counts = {"mem_register": 0, "mem_deregister": 0}
    for rec in result.trace:
        if rec.kind in counts and rec.rc == 0:
            counts[rec.kind] += int(rec.fields.get("count", "0"))
    return counts["mem_register"], counts["mem_deregister"]


def test_inputs_in_shared_memory_give_the_eager_outputs(hil_session, scenario_driver):
    model = hil_session.model("linear_relu", "fp16", SHARED)
    result = scenario_driver.run(cycles(model, "shared_inputs", True))
    failed = [s for s in result.steps if s.status == "error"]
    if failed and "QnnExecuTorchAllocCustomMem" in (failed[0].event or {}).get("message", ""):
        raise check_failed(
            result, f"scenario {result.scenario.name}: step {failed[0].step.describe()}: "
            f"{failed[0].event['message']}; the runtime's words:\n{failed[0].log[-1500:]}",
            "QNN shared memory could not be allocated")
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    registered, deregistered = registrations(result)
    assert registered > 0, f"no QnnMem_register in the trace:\n{result.output.trace_text}"
    assert registered == deregistered, (f"{registered} shared-memory handles registered, "
                                        f"{deregistered} deregistered")


def test_control_the_same_program_with_inputs_on_the_heap(hil_session, scenario_driver):
    model = hil_session.model("linear_relu", "fp16", SHARED)
    result = scenario_driver.run(cycles(model, "shared_buffer_heap_inputs", False))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
