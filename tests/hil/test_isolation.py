"""Isolation scenarios from the proposed upstream fix "Isolate cached delegates by Module lifetime"
(upstream PR 24462, in review).

S1 and S3 fail on executorch 1.5.1 (a process-wide delegate cache); they are strict xfails
through device_configs/known_issues.yaml, and fail with the runtime's own error under
--ignore-known-issues. Each runs on the built-in model named in its hil_programs marker, in
fp16 and int8, or with --pte on the user's programs.
"""

import pytest

from harness.results.assertions import (assert_dsp_heap_bounded, assert_htp_memory_bounded,
                                        assert_isolation, assert_live_counts, assert_memory_within,
                                        assert_outputs_consistent, assert_steps_ok)
from harness.scenario.library import s1_two_modules, s2_shared_context, s3_unload_one, s4_cleanup_reload

BOTH_PRECISIONS = ("fp16", "int8")


@pytest.mark.hil_programs("linear_relu", precisions=BOTH_PRECISIONS, needs=("qnn",))
@pytest.mark.parametrize("destroy_first", ["A", "B"])
def test_s1_two_modules_same_program(hil_program, scenario_driver, destroy_first):
    """Two modules of one .pte; destroying either leaves the other executing, same output."""
    sc = s1_two_modules(hil_program, destroy_first, f"s1_destroy_{destroy_first}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)


@pytest.mark.hil_programs("prefill_decode", precisions=BOTH_PRECISIONS, needs=("qnn", "two_methods"))
def test_s2_methods_share_one_context(hil_program, scenario_driver, hil_session):
    """Two methods (prefill and decode) of one module run on one QNN context (same handle)."""
    sc = s2_shared_context(hil_program, "s2_shared_context")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)
    assert result.step("both_loaded").live.context == 1, result.summary()
    executed = [result.step(s).executes for s in ("first_executed", "second_executed")]
    contexts = {ctx for counts in executed for ctx in counts}
    assert len(contexts) == 1, f"prefill and decode executed on different contexts: {executed}"
    assert result.step("released").live.released, result.summary()
    # Methods of one module add no context, so no HTP memory beyond one context's worth.
    assert_htp_memory_bounded(result, hil_session.htp_context_kb)
    assert_dsp_heap_bounded(result, *hil_session.dsp_heap)  # phones: QNN's DSP heap reading


@pytest.mark.hil_programs("prefill_decode", precisions=BOTH_PRECISIONS, needs=("qnn", "two_methods"))
@pytest.mark.parametrize("unload", ["first", "second"])
def test_s3_unload_one_method_keeps_the_other(hil_program, scenario_driver, unload):
    """Unloading one method of a shared context leaves the other executing."""
    sc = s3_unload_one(hil_program, unload, f"s3_unload_{unload}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)


@pytest.mark.hil_programs("linear_relu", precisions=BOTH_PRECISIONS)
def test_s4_cleanup_and_reload(hil_program, scenario_driver, hil_session):
    """Destroy everything, load again, execute: counts return to zero in between, no leak."""
    sc = s4_cleanup_reload(hil_program, 3, "s4_cleanup_reload")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_live_counts(result)
    cycles = [f"cycle{n}_released" for n in range(3)]
    for cycle in cycles:
        assert result.step(cycle).live.released, f"{cycle}:\n{result.summary()}"
    # The first cycle warms allocators up; later cycles must not keep growing.
    snapshots = [sc.labels[c] for c in cycles]
    assert_memory_within(result, snapshots[1], snapshots[-1], hil_session.rss_leak_kb)
    assert_htp_memory_bounded(result, hil_session.htp_context_kb)
    # phones: DSP heap back at its baseline after every cycle (nothing on the simulator)
    assert_dsp_heap_bounded(result, *hil_session.dsp_heap)
