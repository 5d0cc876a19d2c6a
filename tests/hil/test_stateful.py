"""Stateful programs: methods that mutate buffers (an accumulator, a KV-cache update), with the
buffers delegated to QNN (`skip_mutable_buffer=False`) and XNNPACK controls where the runtime,
not a delegate, holds them.

Every execute is judged against a reference that carries the state through the same sequence
of executes (eager PyTorch for the built-in models, a program's ETRecord for `--pte`), never
against the program's own solo run: a runtime that is consistently wrong would agree with
itself. Two modules of one program must each start from the program's initial state and keep
their own; destroy + reload starts over.
"""

import pytest

from harness.programs.compile import CompiledModel
from harness.results.assertions import assert_separate_states, assert_steps_ok
from harness.scenario import Scenario
from harness.scenario.library import first_method

QNN_MODELS = ("stateful_accumulator", "kv_cache")
CONTROLS = ("stateful_accumulator_xnn", "kv_cache_xnn")
EXECUTES = 3


def executes(sc: Scenario, module: str, method: str, n: int = EXECUTES) -> Scenario:
    for _ in range(n):
        sc.execute(module, method, emit_outputs=True)  # values in the failure message
    return sc


def single_module(model: CompiledModel) -> Scenario:
    method = first_method(model)
    sc = Scenario("stateful_single_module").load_module("A", model)
    return executes(sc, "A", method).destroy_module("A")


def second_module(model: CompiledModel) -> Scenario:
    """B loads while A lives, after A has moved its state on."""
    method = first_method(model)
    sc = executes(Scenario("stateful_second_module").load_module("A", model), "A", method, 2)
    sc.load_module("B", model)
    executes(sc, "B", method, 2)
    sc.execute("A", method, emit_outputs=True)
    return sc.destroy_module("A").destroy_module("B")


def reload(model: CompiledModel) -> Scenario:
    method = first_method(model)
    sc = executes(Scenario("stateful_reload").load_module("A", model), "A", method, 2)
    sc.destroy_module("A").load_module("A", model)
    return executes(sc, "A", method, 2).destroy_module("A")


def alternate(model: CompiledModel) -> Scenario:
    method = first_method(model)
    sc = Scenario("stateful_alternate").load_module("A", model).load_module("B", model)
    for _ in range(EXECUTES):
        sc.execute("A", method, emit_outputs=True).execute("B", method, emit_outputs=True)
    return sc.destroy_module("A").destroy_module("B")


def _run(driver, scenario: Scenario) -> None:
    result = driver.run(scenario)
    # Separate states first: it holds modules to each other, whatever the reference says.
    assert_separate_states(result)
    assert_steps_ok(result)  # every execute equals the stateful reference


@pytest.mark.hil_programs(*QNN_MODELS, needs=("stateful",))
def test_executes_carry_the_state(hil_program, scenario_driver):
    """One module, executes in a row: each equals the reference's execute of that number."""
    _run(scenario_driver, single_module(hil_program))


@pytest.mark.hil_programs(*QNN_MODELS, needs=("stateful",))
def test_second_module_starts_from_the_initial_state(hil_program, scenario_driver):
    """A second Module of the same .pte, loaded while the first lives, starts from the
    program's initial state, and the first continues its own."""
    _run(scenario_driver, second_module(hil_program))


@pytest.mark.hil_programs(*QNN_MODELS, needs=("stateful",))
def test_destroy_and_reload_starts_over(hil_program, scenario_driver):
    """After destroy + reload the state is the program's initial state again."""
    _run(scenario_driver, reload(hil_program))


@pytest.mark.hil_programs(*QNN_MODELS, needs=("stateful",))
def test_two_modules_alternating_keep_separate_states(hil_program, scenario_driver):
    """Two Modules executing alternately each carry their own state."""
    _run(scenario_driver, alternate(hil_program))


@pytest.mark.hil_programs(*CONTROLS, precisions=("fp32",), needs=("xnnpack", "stateful"))
@pytest.mark.parametrize("scenario", [single_module, second_module, reload, alternate],
                         ids=["single_module", "second_module", "reload", "alternate"])
def test_control_xnnpack(hil_program, scenario_driver, scenario):
    """The same modules on XNNPACK, whose buffers the ExecuTorch runtime holds: every scenario
    passes, so a failure of the QNN variants is the QNN delegate's."""
    _run(scenario_driver, scenario(hil_program))
