"""Orderings beyond the fixed scenarios: every interleaving of two modules' lifecycles, and
seeded random interleavings of three, each in a fresh process, checked after every step
against the reference model (steps succeed, outputs agree, contexts isolated, live counts).
Failures are shrunk to a minimal ordering in the report.

With the Python runner (seconds per process) only an evenly spaced sample of the exhaustive
set runs; the native runner runs all of them.
"""

import pytest

from harness.drive.orderings import (ModulePlan, explore, interleavings, random_interleavings,
                               scenario_jobs)
from harness.scenario.library import first_method

PYTHON_RUNNER_SAMPLE = 6
# A device with a round trip per scenario (an adb device) says how many of a large
# exploration it samples, evenly spaced (`Device.exploration_limit`); the simulator runs it whole.
# `hil_cost` markers: rough seconds on the reference 2-core host, on the simulator and (adb=) on
# a loopback device (measured 2026-12-01, both forking a pre-loaded runner), only used to
# balance pytest-xdist workers (harness/plugin/xdist_order.py).


def sample(orderings, hil_session):
    orderings = list(orderings)
    limit = (PYTHON_RUNNER_SAMPLE if hil_session.device_runner == "python" else
             hil_session.device.exploration_limit or len(orderings))
    if len(orderings) > limit:
        step = len(orderings) / limit
        orderings = [orderings[int(i * step)] for i in range(limit)]
    return orderings


def run_all(scenario_driver, hil_session, name, plans, orderings):
    """Every ordering (or the sample), as many at once as the device runs (--scenario-jobs on
    the simulator, one on adb devices); a failure fails the test with the shrunk ordering."""
    exploration = explore(scenario_driver, name, plans, sample(orderings, hil_session),
                          jobs=scenario_jobs(scenario_driver.device))
    assert not exploration.failures, exploration.report()
    return exploration


@pytest.mark.hil_cost(1.5, adb=2.4)
def test_orderings_distinct_programs(compiled_model, scenario_driver, hil_session):
    """Two modules of different programs with the same method name: never share anything."""
    plans = [ModulePlan("A", compiled_model("linear_relu")), ModulePlan("B", compiled_model("mlp_tanh"))]
    exploration = run_all(scenario_driver, hil_session, "ord_distinct", plans, interleavings(plans))
    assert exploration.ran in (70, PYTHON_RUNNER_SAMPLE)


@pytest.mark.hil_cost(1.8, adb=2.6)
@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_orderings_shared_program(hil_program, scenario_driver, hil_session):
    """Two modules of one program: the S1 family, in every interleaving."""
    method = (first_method(hil_program),)
    plans = [ModulePlan("A", hil_program, method), ModulePlan("B", hil_program, method)]
    run_all(scenario_driver, hil_session, "ord_shared", plans, interleavings(plans))


@pytest.mark.hil_cost(0.4, adb=0.6)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_orderings_distinct_programs(compiled_model, scenario_driver, hil_session, seed):
    """Three modules of three programs, one with two methods sharing its context."""
    plans = [ModulePlan("A", compiled_model("linear_relu")),
             ModulePlan("B", compiled_model("mlp_tanh")),
             ModulePlan("C", compiled_model("prefill_decode"), ("prefill", "decode"))]
    run_all(scenario_driver, hil_session, f"ord_random{seed}", plans,
            random_interleavings(plans, 12, seed))


@pytest.mark.hil_cost(0.8, adb=0.9)
@pytest.mark.parametrize("seed", [0])
def test_random_orderings_with_unloads(compiled_model, scenario_driver, hil_session, seed):
    """Methods unloaded one by one while their siblings stay loaded: the S3 family."""
    two = compiled_model("prefill_decode")
    plans = [ModulePlan("A", two, ("prefill", "decode"), unload=True),
             ModulePlan("B", compiled_model("linear_relu"))]
    run_all(scenario_driver, hil_session, f"ord_unload{seed}", plans,
            random_interleavings(plans, 12, seed))


@pytest.mark.hil_cost(1.0, adb=1.5)
def test_orderings_mixed_backend_program(compiled_model, scenario_driver, hil_session):
    """Two modules of one program whose method runs XNNPACK -> QNN -> XNNPACK delegates, in
    every interleaving (up to renaming the two modules)."""
    model = compiled_model("mixed_qnn_xnnpack")
    plans = [ModulePlan("A", model), ModulePlan("B", model)]
    run_all(scenario_driver, hil_session, "ord_mixed", plans,
            interleavings(plans, symmetric=True))


@pytest.mark.hil_cost(7.8, adb=1.8)
def test_orderings_shared_weights_with_unloads(compiled_model, scenario_driver, hil_session):
    """Two methods over the same weights, loaded, executed and unloaded one by one, interleaved
    with another module's convolution: every ordering."""
    plans = [ModulePlan("A", compiled_model("xnn_shared_weights", "fp32"), ("prefill", "decode"),
                        unload=True),
             ModulePlan("B", compiled_model("xnn_convs", "fp32"), ("conv_nobias",),
                        load_method=False)]
    run_all(scenario_driver, hil_session, "ord_shared_weights", plans, interleavings(plans))


@pytest.mark.parametrize("program", [
    pytest.param("xnn_convs", marks=pytest.mark.hil_cost(12.7, adb=1.5)),  # 5775 runs; 300 on adb
    # 280 orderings of three QNN modules, and on 1.5.1 the shrinking of their failures
    pytest.param("linear_relu", marks=pytest.mark.hil_cost(8.1, adb=11.4))])
def test_three_modules_exhaustive(compiled_model, scenario_driver, hil_session, program,
                                  pytestconfig):
    """Three modules of one program, every ordering up to renaming them (6x fewer runs):
    load / load-method / execute / destroy for the XNNPACK convolution (5775 orderings; with
    --full-exploration also unload-method: 126126), and for the QNN program load / execute
    (implicit method load) / destroy (280)."""
    full = pytestconfig.getoption("full_exploration")
    if program == "xnn_convs":
        model = compiled_model(program, "fp32")
        plans = [ModulePlan(m, model, ("conv_nobias",), unload=full) for m in "ABC"]
    else:
        model = compiled_model(program)
        plans = [ModulePlan(m, model, load_method=False) for m in "ABC"]
    orderings = list(interleavings(plans, symmetric=True))
    expected = {"xnn_convs": 126126 if full else 5775, "linear_relu": 280}
    assert len(orderings) == expected[program]
    # (on an adb device or with the Python runner, run_all explores an evenly spaced sample)
    run_all(scenario_driver, hil_session, f"ord_three_{program}", plans, orderings)
