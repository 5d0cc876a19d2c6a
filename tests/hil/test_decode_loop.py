"""A decode loop as an LLM runner drives one: prefill once, then decode steps, each fed the
state the execute before it returned (the step's `feed`: the runner passes the runtime's own
outputs back as the next inputs, as upstream's llama runner passes its KV caches), on a program
lowered with unplanned inputs and outputs as upstream's LLM flow lowers. Every step is judged
against eager PyTorch's same step of the same loop (compile_worker.decode_loop_reference), so a
runtime that drifts, or a step that reads another module's state, is a mismatch at the step
where it starts. Two modules of one program running their loops side by side meet the
delegate-cache bug (qnn-delegate-cache-module-lifetime) when the first is destroyed.
"""

import pytest

from harness.results.assertions import (assert_isolation, assert_live_counts,
                                        assert_outputs_consistent, assert_steps_ok)
from harness.scenario import Scenario
from harness.scenario.library import decode_loop, decode_step

UNPLANNED = {"unplanned_io": True}


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
def test_decode_loop_feeds_each_steps_outputs_to_the_next(hil_program, scenario_driver):
    sc = decode_loop(Scenario("decode_loop").load_module("A", hil_program), "A", hil_program)
    result = scenario_driver.run(sc.destroy_module("A").snapshot().label("released"))
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)
    assert result.step("released").live.released, result.summary()


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
def test_decode_loop_after_destroy_and_reload_starts_over(hil_program, scenario_driver):
    sc = Scenario("decode_loop_reload")
    for _ in range(2):
        decode_loop(sc.load_module("A", hil_program), "A", hil_program).destroy_module("A")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_live_counts(result)


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=("qnn", "two_methods"))
def test_decode_loop_on_two_modules_of_one_program(hil_program, scenario_driver):
    """A and B each run the loop, steps interleaved; then A is destroyed and B's loop goes on
    from its own last state: every step of both loops, and B's after A is gone, must be right."""
    loop = hil_program.decode_loop
    sc = Scenario("decode_loop_two_modules").load_module("A", hil_program)
    sc.load_module("B", hil_program)
    sc.execute("A", loop["after"]).execute("B", loop["after"])
    half = loop["steps"] // 2
    for k in range(half):
        for module in ("A", "B"):
            decode_step(sc, module, hil_program, k)
    sc.destroy_module("A").label("first_destroyed")
    for k in range(half, loop["steps"]):
        decode_step(sc, "B", hil_program, k)
    result = scenario_driver.run(sc.destroy_module("B"))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)
