"""Release of the QNN library at a full teardown: with no module left, the runtime drops its
backend bundle and dlcloses libQnnHtp.so (QnnImplementation); the next load opens it again and
asks for its interface afresh (QnnInterface_getProviders, which the interposer traces as `api`).
Whether the library then leaves the process is the loader's business (POSIX lets dlclose keep a
library; the trace's `library_open ... unloadable=` says what the harness measured), so the test
judges the runtime's calls, not the residency. The scenario runs in a new runner process that
preloaded nothing (`Scenario.fresh_process`): a fork of the server that holds the QNN libraries,
as every other suite runs, never releases them.
"""

from harness.results.assertions import (assert_live_counts, assert_outputs_consistent,
                                        assert_steps_ok, check_failed)
from harness.scenario import Scenario

CYCLES = 3


def library_events(result) -> list[tuple[int, str, str]]:
    """(step index, "open" | "close", the open's `unloadable`: "1", "0" or "unknown") of each
    library_open / library_close the trace has (the interposer writes none at exit)."""
    return [(i, rec.kind.split("_")[1], rec.fields.get("unloadable", ""))
            for i in range(len(result.steps)) for rec in result.trace_during(i)
            if rec.kind in ("library_open", "library_close")]


def provider_queries(result) -> list[int]:
    """Step index of each QnnInterface_getProviders call (the interposer's `api` record): the
    runtime asks the library for its interface once per dlopen (QnnImplementation::Load)."""
    return [i for i in range(len(result.steps)) for rec in result.trace_during(i)
            if rec.kind == "api"]


def test_a_full_teardown_releases_the_qnn_library_and_the_next_load_opens_it(hil_session,
                                                                            scenario_driver):
    """What the runtime owes at a full teardown: it drops its backend bundle and releases the
    library (QnnImplementation::Unload, dlclose), and the next load opens it again and asks for
    its interface afresh. Whether the library then leaves the process is the dynamic loader's
    and the library's business (POSIX lets dlclose keep it; here the onnxruntime-qnn wheel's
    vendored libc++, NODELETE, holds libQnnHtp.so), so it is reported, not judged."""
    model = hil_session.model("linear_relu", "fp16")
    sc = Scenario("library_unload_reload", fresh_process=True)
    for cycle in range(CYCLES):
        sc.load_module("A", model).execute("A", "forward").execute("A", "forward")
        sc.destroy_module("A").label(f"cycle{cycle}")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_live_counts(result)
    ends = [result.scenario.labels[f"cycle{k}"] for k in range(CYCLES)]
    queries = provider_queries(result)
    starts = [0, *(end + 1 for end in ends[:-1])]
    per_cycle = [sum(1 for q in queries if lo <= q <= hi) for lo, hi in zip(starts, ends)]
    events = library_events(result)
    resident = {u for _, what, u in events if what == "open"} == {"0"}
    print(f"QnnInterface_getProviders per cycle: {per_cycle}; the real libQnnHtp.so "
          f"{'stays resident after dlclose (the loader keeps it)' if resident else 'may unload'}")
    if per_cycle == [1] * CYCLES:
        return
    raise check_failed(
        result, f"scenario {result.scenario.name}: the runtime asked libQnnHtp.so for its "
        f"interface {per_cycle} times in the {CYCLES} load/destroy cycles (steps {queries}); "
        "each full teardown must release the library and each next load open it again "
        f"(once per cycle):\n{result.summary()}",
        "the runtime did not release and reopen the QNN library at each full teardown")
