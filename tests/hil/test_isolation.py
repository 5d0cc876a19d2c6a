"""Isolation scenarios from the upstream fix "Isolate cached delegates by Module lifetime".

S1 and S3 fail on executorch 1.5.1 (a process-wide delegate cache); they are strict xfails
through device_configs/known_issues.yaml, and fail with the runtime's own error under
--ignore-known-issues.
"""

import pytest

from harness.assertions import (assert_htp_memory_bounded, assert_isolation, assert_live_counts,
                                assert_memory_within, assert_outputs_consistent, assert_steps_ok)
from harness.scenarios import s1_two_modules, s2_shared_context, s3_unload_one, s4_cleanup_reload

# Every scenario runs on the fp16 and the quantized (int8) build of its model.
pytestmark = pytest.mark.parametrize("precision", ["fp16", "int8"])


@pytest.mark.parametrize("destroy_first", ["A", "B"])
def test_s1_two_modules_same_program(compiled_model, scenario_driver, destroy_first, precision):
    """Two modules of one .pte; destroying either leaves the other executing, same output."""
    sc = s1_two_modules(compiled_model("linear_relu", precision), destroy_first,
                        f"s1_destroy_{destroy_first}_{precision}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)


def test_s2_methods_share_one_context(compiled_model, scenario_driver, hil_session, precision):
    """prefill and decode of one module run on one QNN context (same handle)."""
    sc = s2_shared_context(compiled_model("prefill_decode", precision), f"s2_shared_context_{precision}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)
    both_loaded = result.steps[2]
    assert both_loaded.live["context"] == 1, result.summary()
    executed = [s.trace["executes"] for s in result.steps[3:5]]
    contexts = {ctx for counts in executed for ctx in counts}
    assert len(contexts) == 1, f"prefill and decode executed on different contexts: {executed}"
    assert result.steps[-1].live == {"backend": 0, "context": 0, "device": 0}, result.summary()
    # Methods of one module add no context, so no HTP memory beyond one context's worth.
    assert_htp_memory_bounded(result, hil_session.htp_context_kb)


@pytest.mark.parametrize("unload", ["prefill", "decode"])
def test_s3_unload_one_method_keeps_the_other(compiled_model, scenario_driver, unload, precision):
    """Unloading one method of a shared context leaves the other executing."""
    sc = s3_unload_one(compiled_model("prefill_decode", precision), unload,
                       f"s3_unload_{unload}_{precision}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_isolation(result)
    assert_live_counts(result)


def test_s4_cleanup_and_reload(compiled_model, scenario_driver, hil_session, precision):
    """Destroy everything, load again, execute: counts return to zero in between, no leak."""
    sc = s4_cleanup_reload(compiled_model("linear_relu", precision), 3, f"s4_cleanup_reload_{precision}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_live_counts(result)
    snapshots = [i for i, s in enumerate(result.steps) if s.step.op == "snapshot"]
    for i in snapshots:
        assert result.steps[i].live == {"backend": 0, "context": 0, "device": 0}, result.summary()
    # The first cycle warms allocators up; later cycles must not keep growing.
    assert_memory_within(result, snapshots[1], snapshots[-1], hil_session.rss_leak_kb)
    assert_htp_memory_bounded(result, hil_session.htp_context_kb)
