"""S1-S4 on a program whose inputs and outputs are not memory-planned, lowered the way upstream's
QNN LLM flow lowers (`MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)`):
the app owns every input and output buffer, so the runners bind their own (the native runner
with `Module::set_output` before every execute, freed with the method). Without those buffers
the delegate is given none ("clientBuf is null", QNN error 6004) and every suite would end in
a setup error. The program is `prefill_decode` (two methods sharing weights and one context, as
an LLM export's prefill and decode do); outputs are compared with eager PyTorch. S1 and S3 meet
the delegate-cache bug (qnn-delegate-cache-module-lifetime) as on planned programs. The test
names avoid "s1".."s4", so that `-k s4` keeps selecting the isolation suite's own tests.
"""

import pytest

from harness.results.assertions import (assert_isolation, assert_live_counts,
                                        assert_outputs_consistent, assert_steps_ok)
from harness.scenario import Scenario
from harness.scenario.library import s1_two_modules, s2_shared_context, s3_unload_one

UNPLANNED = {"unplanned_io": True}


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
@pytest.mark.parametrize("destroy_first", ["A", "B"])
def test_unplanned_io_two_modules_of_one_program(hil_program, scenario_driver, destroy_first):
    sc = s1_two_modules(hil_program, destroy_first, f"unplanned_destroy_{destroy_first}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
def test_unplanned_io_methods_share_one_context(hil_program, scenario_driver):
    result = scenario_driver.run(s2_shared_context(hil_program, "unplanned_shared_context"))
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)
    assert result.step("both_loaded").live.context == 1, result.summary()
    assert result.step("released").live.released, result.summary()


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
@pytest.mark.parametrize("unload", ["first", "second"])
def test_unplanned_io_unload_one_method(hil_program, scenario_driver, unload):
    result = scenario_driver.run(s3_unload_one(hil_program, unload, f"unplanned_unload_{unload}"))
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
def test_unplanned_io_destroy_and_reload(hil_program, scenario_driver):
    """Load, execute both methods twice, destroy: three times. The runner's output buffers are
    freed with their method and bound afresh after each load; every output is the eager one."""
    sc = Scenario("unplanned_reload")
    for cycle in range(3):
        sc.load_module("A", hil_program)
        for method in hil_program.methods:
            sc.execute("A", method).execute("A", method)
        sc.destroy_module("A").snapshot().label(f"cycle{cycle}_released")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_live_counts(result)
    for cycle in range(3):
        assert result.step(f"cycle{cycle}_released").live.released, result.summary()
