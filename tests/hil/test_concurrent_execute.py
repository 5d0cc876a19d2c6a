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
from harness.protocol.nemesis import hold
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


def execute_racing_load_and_destroy(model: CompiledModel, name: str,
                                    other: CompiledModel | None = None) -> Scenario:
    """A executes while B loads `forward` (the load that finds A's cached manager), B executes
    on the other inputs, then A executes while B is destroyed, and A executes once more. With
    `other`, B is a Module of that program (no manager to share)."""
    sc = Scenario(name)
    sc.load_module("A", model).load_method("A", "forward").load_module("B", other or model)
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


def test_an_execute_racing_another_programs_load_and_destroy(compiled_model, scenario_driver):
    """The same race with B of another program: no delegate is shared, so every step must work
    on 1.5.1; under --valgrind=helgrind it is where the QNN backend's unlocked reads of its
    delegate maps meet B's writes (known issue qnn-delegate-maps-read-unlocked)."""
    a, b = compiled_model("linear_relu"), compiled_model("mlp_tanh")
    check(scenario_driver.run(execute_racing_load_and_destroy(a, "race_two_programs", b)))


def test_control_xnnpack_execute_racing_load_and_destroy(compiled_model, scenario_driver):
    model = compiled_model("xnn_linear_stack", "fp32")
    check(scenario_driver.run(execute_racing_load_and_destroy(model, "race_xnnpack")))


# Deterministic endings, forced at the QNN boundary by the interposer (harness.protocol.nemesis):
# each run makes one interleaving, so each ending has its own verdict.

FORCED_ROUNDS = 10  # two rules a round, at most 32 rules a scenario


def forced_concurrent_executes(model: CompiledModel, name: str) -> Scenario:
    """`concurrent_executes` with the two threads inside QnnGraph_execute of the shared graph
    at once in every round, the runtime's own part of each execute (filling the shared tensor
    wrappers and cloning them) one after the other: B's k-th execute step starts once A has
    entered its k-th QnnGraph_execute, which waits there until B has entered its own."""
    sc = Scenario(name)
    for k in range(1, FORCED_ROUNDS + 1):
        sc.nemesis(hold("enter", f"B:step.execute#{k}", "enter", f"A:QnnGraph_execute#{k}"),
                   hold("enter", f"A:QnnGraph_execute#{k}", "enter", f"B:QnnGraph_execute#{k}"))
    sc.load_module("A", model).load_module("B", model)
    sc.load_method("A", "forward").load_method("B", "forward")
    for _ in range(FORCED_ROUNDS):
        sc.parallel(("execute", "A", "forward", 0), ("execute", "B", "forward", 1))
    return sc.destroy_module("A").destroy_module("B").snapshot()


@pytest.mark.parametrize("program", ["linear_relu"])
def test_forced_concurrent_execute_on_one_cached_manager(compiled_model, scenario_driver, program):
    model = compiled_model(program)
    check(scenario_driver.run(forced_concurrent_executes(model, f"forced_concurrent_{program}")))


# Where B's destroy lands against A's second execute (B's load found A's cached manager, so
# B's destroy frees what A executes on). B's destroy frees the runtime's own graph and tensor
# objects before its QnnContext_free, so B's destroy may start only once A is inside
# QnnGraph_execute (past the runtime's use of them), except when it must end before A starts.
B_DESTROYS_ONCE_A_EXECUTES = hold("enter", "B:step.destroy_module#1", "enter", "A:QnnGraph_execute#2")
DESTROY_ENDINGS = {
    # B's whole destroy runs before A's execute step starts: A's execute finds its delegate
    # handle gone.
    "destroy_before_execute": (hold("enter", "A:step.execute#2", "leave", "B:step.destroy_module#1"),),
    # A has passed the runtime's checks and entered QnnGraph_execute; the real call starts only
    # once B's whole destroy returned: A executes a graph of a freed context and backend.
    "destroy_before_graph_execute": (
        B_DESTROYS_ONCE_A_EXECUTES,
        hold("enter", "A:QnnGraph_execute#2", "leave", "B:step.destroy_module#1")),
    # B's destroy has freed the runtime's graph and tensor objects and entered QnnContext_free
    # when A's execute step starts, and B's destroy goes on (drops the cached delegate) only
    # once A's step returned: A's execute passes the delegate check and uses freed objects.
    "destroy_during_execute_step": (
        hold("enter", "A:step.execute#2", "enter", "B:QnnContext_free#1"),
        hold("leave", "B:QnnContext_free#1", "leave", "A:step.execute#2")),
    # A, inside QnnGraph_execute, calls the real function once B has entered QnnContext_free:
    # the execute and the free of its context start together (which one QNN runs first is
    # inside QNN).
    "graph_execute_racing_free": (
        B_DESTROYS_ONCE_A_EXECUTES,
        hold("enter", "A:QnnGraph_execute#2", "enter", "B:QnnContext_free#1")),
    # B's destroy starts once A is inside QnnGraph_execute, and A leaves it only after B's
    # QnnContext_free returned: the free runs during A's execute.
    "free_during_graph_execute": (
        B_DESTROYS_ONCE_A_EXECUTES,
        hold("leave", "A:QnnGraph_execute#2", "leave", "B:QnnContext_free#1")),
}


def forced_destroy_during_execute(model: CompiledModel, name: str, rules: tuple[str, ...]) -> Scenario:
    """A and B (B on A's cached manager) each execute once, then A executes while B is
    destroyed, in the order `rules` force; A executes once more and is destroyed."""
    sc = Scenario(name).nemesis(*rules)
    sc.load_module("A", model).load_method("A", "forward")
    sc.load_module("B", model).load_method("B", "forward")
    sc.execute("A", "forward").execute("B", "forward", variant=1)
    sc.parallel(("execute", "A", "forward"), ("destroy_module", "B"))
    sc.execute("A", "forward").label("after_race")
    return sc.destroy_module("A").snapshot()


@pytest.mark.parametrize("ending", list(DESTROY_ENDINGS))
def test_forced_destroy_during_execute(compiled_model, scenario_driver, ending):
    model = compiled_model("linear_relu")
    result = scenario_driver.run(forced_destroy_during_execute(
        model, f"forced_{ending}", DESTROY_ENDINGS[ending]), allow_crash=True)
    check(result)
