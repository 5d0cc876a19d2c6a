"""Concurrent execute on a shared delegate: two Modules of one `.pte`, one thread each,
executing together on different inputs, and an execute racing another module's load or destroy.

Why: a second Module of the same program runs on the first one's cached QNN manager (the
delegate-cache family), and the backend's `execute` fills that shared manager's tensor wrappers'
data pointers before cloning them, so two threads can interleave there (the ONNX Runtime QNN EP
fixed the same pattern). With the same inputs on both threads an interleaving is invisible, so
B executes on the method's other input set (`variant=1`, elements of the reference inputs in
another order, with their own eager outputs): each output must be its own input's.

Controls, where the bug cannot apply: the same executes on two different programs (no shared
manager), and on an XNNPACK program (no QNN cache).
"""

from __future__ import annotations

import os

import pytest

from harness.programs.compile import CompiledModel
from harness.results.assertions import assert_isolation, assert_live_counts, assert_steps_ok
from harness.scenario import Scenario

# Executes per module, each round both threads released together.
ROUNDS = int(os.environ.get("HARNESS_CONCURRENT_EXECUTE_ROUNDS", "25"))


@pytest.fixture(autouse=True)
def overlapping_runner(hil_session):
    """The executes must really overlap: the Python runner's pybindings hold the GIL."""
    if hil_session.device_runner == "python":
        pytest.skip("concurrent execute needs the native runner: the executorch pybindings "
                    "hold the GIL, so the Python runner runs the two executes one after another")


def concurrent_executes(a: CompiledModel, b: CompiledModel, name: str) -> Scenario:
    """A and B load `forward`, then ROUNDS times execute together, A on the reference inputs
    and B on the other input set; destroyed, then a snapshot (nothing may be left)."""
    sc = Scenario(name)
    sc.load_module("A", a).load_module("B", b)
    sc.load_method("A", "forward").load_method("B", "forward")
    for _ in range(ROUNDS):
        sc.parallel(("execute", "A", "forward", 0), ("execute", "B", "forward", 1))
    return sc.destroy_module("A").destroy_module("B").snapshot()


def execute_racing_load_and_destroy(model: CompiledModel, name: str) -> Scenario:
    """A executes while B loads `forward` (the load that finds A's cached manager), B executes
    on the other inputs, then A executes while B is destroyed, and A executes once more."""
    sc = Scenario(name)
    sc.load_module("A", model).load_method("A", "forward").load_module("B", model)
    sc.parallel(("execute", "A", "forward"), ("load_method", "B", "forward"))
    sc.execute("B", "forward", variant=1)
    sc.parallel(("execute", "A", "forward"), ("destroy_module", "B"))
    sc.execute("A", "forward").label("after_race")
    return sc.destroy_module("A").snapshot()


def check(result) -> None:
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)


@pytest.mark.hil_cost(1.0)
@pytest.mark.parametrize("program", ["linear_relu", "mlp_tanh"])
def test_two_modules_of_one_program_execute_together_on_different_inputs(
        compiled_model, scenario_driver, program):
    model = compiled_model(program)
    check(scenario_driver.run(concurrent_executes(model, model, f"concurrent_{program}")))


@pytest.mark.hil_cost(1.0)
def test_control_two_programs_execute_together(compiled_model, scenario_driver):
    a, b = compiled_model("linear_relu"), compiled_model("mlp_tanh")
    check(scenario_driver.run(concurrent_executes(a, b, "concurrent_two_programs")))


@pytest.mark.hil_cost(1.0)
def test_control_xnnpack_modules_execute_together(compiled_model, scenario_driver):
    model = compiled_model("xnn_linear_stack", "fp32")
    check(scenario_driver.run(concurrent_executes(model, model, "concurrent_xnnpack")))


@pytest.mark.parametrize("program", ["linear_relu"])
def test_an_execute_racing_another_modules_load_and_destroy(compiled_model, scenario_driver,
                                                            program):
    model = compiled_model(program)
    check(scenario_driver.run(execute_racing_load_and_destroy(model, f"race_{program}")))


def test_control_xnnpack_execute_racing_load_and_destroy(compiled_model, scenario_driver):
    model = compiled_model("xnn_linear_stack", "fp32")
    check(scenario_driver.run(execute_racing_load_and_destroy(model, "race_xnnpack")))
