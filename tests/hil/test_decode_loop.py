"""A decode loop as an LLM runner drives one: prefill once, then decode steps, each fed the
state the execute before it returned, on a program lowered with unplanned inputs and outputs
as upstream's LLM flow lowers.

On the built-in `prefill_decode` each step's `feed` passes the runtime's own outputs back as
the next inputs, and every step is judged against eager PyTorch's same step of the same loop
(compile_worker.decode_loop_reference). With `--pte` on an LLM export (upstream's Qualcomm
llama flow: harness.programs.llm reads its layout) the runner builds each step as upstream's
QNN llama runner does (the protocol's `decode`: the token the argmax of the last logits, the
new KV entries written after the cached ones, the mask and position moved on), and every step
is judged against the solo run of the same loop (harness.drive.llm_loop), whose tokens every
variant must reproduce. So a runtime that drifts, or a step that reads another module's
state, is a mismatch at the step where it starts. Two modules of one program running their
loops side by side meet the delegate-cache bug (qnn-delegate-cache-module-lifetime) when the
first is destroyed.
"""

import pytest

from harness.drive.llm_loop import loop_tokens
from harness.results.assertions import (assert_isolation, assert_live_counts,
                                        assert_outputs_consistent, assert_steps_ok)
from harness.scenario import Scenario
from harness.scenario.library import decode_loop, decode_prefill, decode_step

UNPLANNED = {"unplanned_io": True}
NEEDS = ("qnn", "two_methods", "decode_loop")


def assert_tokens(result, model, module: str, loops: list[int]) -> None:
    """The tokens `module` fed are the solo loop's, one run of its first `n` steps per entry
    of `loops` (an LLM export's loop only: a built-in model's steps feed no token)."""
    solo = model.decode_loop.get("tokens")
    if solo is None:
        return
    want = [t for n in loops for t in solo[:n]]
    got = loop_tokens(result, module)
    assert got == want, (f"module {module} fed the tokens {got}; the solo loop's are {want} "
                         f"(prompt {model.decode_loop['prompt']})\n{result.summary()}")


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=NEEDS)
def test_decode_loop_feeds_each_steps_outputs_to_the_next(hil_program, scenario_driver):
    sc = decode_loop(Scenario("decode_loop").load_module("A", hil_program), "A", hil_program)
    result = scenario_driver.run(sc.destroy_module("A").snapshot().label("released"))
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)
    assert_tokens(result, hil_program, "A", [hil_program.decode_loop["steps"]])
    assert result.step("released").live.released, result.summary()


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=NEEDS)
def test_decode_loop_after_destroy_and_reload_starts_over(hil_program, scenario_driver):
    """Half a loop, the module destroyed mid-loop and loaded again, then the whole loop: the
    reloaded module starts from nothing, so every step is the solo loop's again."""
    steps = hil_program.decode_loop["steps"]
    half = max(1, steps // 2)
    sc = Scenario("decode_loop_reload")
    decode_loop(sc.load_module("A", hil_program), "A", hil_program, half).destroy_module("A")
    decode_loop(sc.load_module("A", hil_program), "A", hil_program).destroy_module("A")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_live_counts(result)
    assert_tokens(result, hil_program, "A", [half, steps])


@pytest.mark.hil_programs("prefill_decode", options=UNPLANNED, needs=NEEDS)
def test_decode_loop_on_two_modules_of_one_program(hil_program, scenario_driver):
    """A and B each run the loop, steps interleaved; then A is destroyed and B's loop goes on
    from its own last state: every step of both loops, and B's after A is gone, must be right."""
    steps = hil_program.decode_loop["steps"]
    sc = Scenario("decode_loop_two_modules").load_module("A", hil_program)
    sc.load_module("B", hil_program)
    decode_prefill(sc, "A", hil_program)
    decode_prefill(sc, "B", hil_program)
    half = steps // 2
    for k in range(half):
        for module in ("A", "B"):
            decode_step(sc, module, hil_program, k)
    sc.destroy_module("A").label("first_destroyed")
    for k in range(half, steps):
        decode_step(sc, "B", hil_program, k)
    result = scenario_driver.run(sc.destroy_module("B"))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)
    assert_tokens(result, hil_program, "A", [half])
    assert_tokens(result, hil_program, "B", [steps])
