"""Report data on synthetic runs: results.json entries, metrics, JUnit properties, the page's
HTML pieces and plot, device state parsing, and `compare` (no simulator needed)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest

from harness.results import xnnpack
from harness.results.xnnpack_launches import FileState, Launch, judge
from harness.results.compare import compare, main as compare_main, render
from harness.programs.compile import CompiledModel, MethodReference
from harness.devices.state import SIMULATOR_REASON, parse_state
from harness.results.failures import run_failures
from harness.report.plugin import kept_runs
from harness.report.html import devices_section, failing_steps, known_issues_section, extras_for_test
from harness.report.plots import scenario_plot
from harness.protocol.output import RunOutput
from harness.results.run import ScenarioResult
from harness.results import (SCHEMA, ResultsError, junit_properties, load_results, run_entry,
                             metrics_of, xnnpack_entry)
from harness.protocol.wire import EVENT_PREFIX, STEP_MARKER
from harness.scenario import Scenario
from harness.qnn.trace import parse_trace
from harness.protocol.tensors import TensorFile

NODE = "tests/hil/test_x.py::test_y"


def model(tmp_path: Path, name: str = "linear_relu") -> CompiledModel:
    ref = MethodReference((TensorFile("float32", (1, 4), tmp_path / "in.bin"),),
                          (TensorFile("float32", (1, 4), tmp_path / "out.bin"),))
    return CompiledModel(name, "qnn", "SM8650", "fp16", tmp_path / f"{name}.pte",
                         {"forward": ref}, 1e-3, 1e-3)


def s1_result(tmp_path: Path, fail: bool = True, rss_kb: int = 100_000,
              execute_ms: float = 20.0) -> ScenarioResult:
    """S1 as the runner reports it: module A destroyed, B's execute fails (or not)."""
    m = model(tmp_path)
    sc = Scenario("s1_destroy_A").load_module("A", m).load_module("B", m)
    sc.execute("A", "forward").execute("B", "forward").destroy_module("A").execute("B", "forward")
    trace = ("1 api core=2.40.0 backend=5.51.0 provider=HTP bridge=1\n"
             "2 backend_create rc=0 handle=0x1\n3 context_create rc=0 handle=0x5\n"
             "4 context_free rc=0 handle=0x5\n")
    offsets = [0, 0, len("1 api core=2.40.0 backend=5.51.0 provider=HTP bridge=1\n"
                         "2 backend_create rc=0 handle=0x1\n3 context_create rc=0 handle=0x5\n"),
               None, len(trace), len(trace)]
    offsets[3] = offsets[2]
    lines = [EVENT_PREFIX + json.dumps({"event": "start", "runner": "native", "pid": 1,
                                        "scenario": sc.name})]
    err = []
    for i, step in enumerate(sc.steps):
        bad = fail and i == 5
        lines.append(EVENT_PREFIX + json.dumps({
            "event": "step", "index": i, "op": step.op, "module": step.module,
            "method": step.method, "status": "error" if bad else "ok",
            "error_code": 1 if bad else 0,
            "message": "execute(forward) failed: Error::Internal (0x1)" if bad else "",
            "elapsed_ms": execute_ms if step.op == "execute" else 0.05,
            "outputs": [{"dtype": "float32", "shape": [1, 4], "sha256": "ab"}]
            if step.op == "execute" and not bad else [],
            "max_abs_diff": 0.0, "option": None, "trace_offset": offsets[i],
            "memory": {"rollup": {"Rss": rss_kb + 1000 * i, "Pss": rss_kb - 10, "Anonymous": 4000,
                                  "Private_Dirty": 4000}, "mappings": {},
                       "dmabuf": {"count": 1, "bytes": 4096 * i}}}))
        err.append(f"{STEP_MARKER}{i} {step.op}")
        if bad:
            err.append("E executorch:QnnExecuTorchBackend.cpp:128] DelegateHandle has been deleted")
    lines.append(EVENT_PREFIX + json.dumps({"event": "end", "status": "failed" if fail else "ok",
                                            "steps": len(sc.steps), "failed_steps": int(fail)}))
    out = RunOutput(1 if fail else 0, "\n".join(lines) + "\n", "\n".join(err) + "\n", trace,
                    runner="native")
    return ScenarioResult.build(sc, out, parse_trace(trace), tmp_path / "artifacts")


def entry(result: ScenarioResult, index: int = 0, occurrence: int = 0) -> dict:
    return run_entry(result, run_failures(result), nodeid=NODE, index=index,
                     occurrence=occurrence, device="simulator")


def test_run_entry_has_steps_live_counts_memory_and_failures(tmp_path):
    run = entry(s1_result(tmp_path))
    assert run["scenario"] == "s1_destroy_A" and run["completed"] and run["runner"] == "native"
    assert [s["op"] for s in run["steps"]] == ["load_module", "load_module", "execute", "execute",
                                               "destroy_module", "execute"]
    step = run["steps"][5]
    assert step["status"] == "error" and "Error::Internal" in step["message"]
    assert step["memory"]["rss_kb"] == 105_000 and step["memory"]["dmabuf_bytes"] == 4096 * 5
    assert run["steps"][2]["live"]["context"] == 1 and run["steps"][5]["live"]["context"] == 0
    assert run["failures"][0]["kind"] == "error" and run["failures"][0]["step"] == 5
    assert "DelegateHandle has been deleted" in run["failures"][0]["message"]
    assert run["modules"]["A"]["model"] == "linear_relu"
    json.dumps(run)  # JSON-ready: it travels to the xdist controller and into results.json


def test_metrics_and_junit_properties(tmp_path):
    runs = [entry(s1_result(tmp_path, fail=False, execute_ms=10.0)),
            entry(s1_result(tmp_path, fail=False, rss_kb=200_000, execute_ms=30.0), 1, 1)]
    metrics = metrics_of(runs)
    assert metrics["scenarios"] == 2 and metrics["failed_scenarios"] == 0
    assert metrics["peak"]["rss_kb"] == 205_000 and metrics["peak"]["dmabuf_bytes"] == 4096 * 5
    assert metrics["execute_ms"]["linear_relu.forward"] == {"n": 6, "median": 20.0, "max": 30.0}
    assert metrics["live_end"] == {"backend": 1, "context": 0, "device": 0}
    verdict = {"scenario": "x1", "module": "A", "classification": "fallback",
               "expected": "fallback", "heap_bytes": 32 << 20, "mapped_bytes": 0,
               "weight_bytes": 32 << 20}
    props = dict(junit_properties({"known_issue": "bug-1", "device": "simulator",
                                   "metrics": metrics, "xnnpack": [verdict]}))
    assert props["hil.known_issue"] == "bug-1" and props["hil.device"] == "simulator"
    assert props["hil.peak_rss_kb"] == "205000" and props["hil.live_end.context"] == "0"
    assert props["hil.execute_ms.linear_relu.forward.median"] == "20.0"
    assert props["hil.xnnpack.x1.A"].startswith("fallback (expected fallback): heap 32.0 MiB")


def test_xnnpack_verdicts_are_collected_per_block(tmp_path):
    load = xnnpack.CacheLoad("x1", "A", "forward", None, "mapped", 10, 0, 10, 0, 0, 0, 1)
    with xnnpack.collect_verdicts() as seen:
        xnnpack._note_verdict(load, "mapped")
    xnnpack._note_verdict(load, None)  # outside any block: nobody listens
    assert seen == [(load, "mapped")]


def test_xnnpack_reason_and_launches_reach_junit_and_the_page(tmp_path):
    """The runtime's branch, errno and reason of a launch, and a cache's verdict across
    launches, are in the JUnit properties and the test's HTML block."""
    load = xnnpack.CacheLoad("x1", "A", "forward", "/c/x", "fallback", 32 << 20, 32 << 20, 0,
                             0, 0, 0, 2, ("E ... flock(/c/x) failed (errno=11)",),
                             "flock_failed", 11, "another process holds the cache file")
    entry_ = xnnpack_entry(load, "fallback")
    assert (entry_["branch"], entry_["errno"]) == ("flock_failed", 11)
    same = FileState(10, "1")
    story = judge("held", [Launch(load, same, same)] * 2).to_json()
    props = dict(junit_properties({"metrics": {"scenarios": 1, "failed_scenarios": 0},
                                   "xnnpack": [entry_], "xnnpack_launches": [story]}))
    assert props["hil.xnnpack.x1.A"].endswith(
        "; branch flock_failed, errno 11: another process holds the cache file")
    assert props["hil.xnnpack_launches.held"].endswith(": permanent")
    result = s1_result(tmp_path)
    page = extras_for_test({"xnnpack": [entry_], "xnnpack_launches": [story]}, [entry(result)],
                           [result], None)[0]["content"]
    assert "<td>flock_failed</td><td>11</td>" in page and "held</b>: another process" in page


def test_page_pieces_show_the_failing_step_its_log_and_qnn_calls(tmp_path):
    result = s1_result(tmp_path)
    run = entry(result)
    test = {"known_issue": "qnn-delegate-cache-module-lifetime", "device": "simulator",
            "metrics": metrics_of([run]), "xnnpack": []}
    extras = extras_for_test(test, [run], [result], None)
    assert [e["format_type"] for e in extras] == ["html", "image"]
    page = extras[0]["content"]
    assert '<tr class="hil-fail"><td class="num">5</td><td>execute(B.forward)</td>' in page
    assert "DelegateHandle has been deleted" in page  # the runtime's log during that step
    assert "[step 4] 4 context_free rc=0 handle=0x5" in page  # the QNN call that freed it
    assert "qnn-delegate-cache-module-lifetime" in page
    png = base64.b64decode(extras[1]["content"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert failing_steps(run) == {5}


def test_plot_of_a_run_without_memory_readings_still_draws(tmp_path):
    run = entry(s1_result(tmp_path))
    for step in run["steps"]:
        step["memory"] = None
    assert base64.b64decode(scenario_plot(run, set()))[:4] == b"\x89PNG"


def test_results_keep_failing_runs_and_a_bounded_number_of_others():
    runs = [{"scenario": f"s{i}", "failures": [{"kind": "error"}] if i in (7, 150) else []}
            for i in range(200)]
    kept = kept_runs(runs, 5)
    assert kept == [0, 1, 2, 3, 4, 7, 150]
    assert kept_runs(runs, 0) == list(range(200))
    assert 120 in kept_runs(runs, 5, {"scenario": "s120"})  # the one the test's failure names


PHONE = """\
gov policy0 schedutil 1804800 0 1 2 3
gov policy4 performance 2419200 4 5 6
thermal thermal_zone0 cpu-0-0-usr 41200
thermal thermal_zone12 battery 30100
battery Current Battery Service state:
battery   AC powered: false
battery   USB powered: true
battery   status: 2
battery   level: 87
battery   temperature: 301
"""


def test_phone_state_is_parsed_and_shown_at_start_and_end():
    state = parse_state(PHONE)
    assert state["cpufreq"]["policy4"] == {"governor": "performance", "cur_khz": 2419200,
                                           "cpus": "4 5 6"}
    assert state["thermal"]["thermal_zone12"] == {"type": "battery", "temp_millideg_c": 30100}
    assert state["battery"]["level"] == 87 and state["battery"]["status_name"] == "charging"
    end = copy.deepcopy(state)
    end["thermal"]["thermal_zone0"]["temp_millideg_c"] = 55000
    section = devices_section([{"worker": "gw0", "serial": "R5CX", "kind": "adb", "soc": "SM8650",
                                "state": {"start": {**state, "available": True},
                                          "end": {**end, "available": True}}}])
    assert "schedutil @ 1805 MHz" in section and "41.2 °C" in section and "55.0 °C" in section
    assert "battery level" in section


def test_simulator_has_no_phone_state_and_says_so():
    from harness.devices.simulator import SimulatorDevice

    state = SimulatorDevice.read_state(None)  # type: ignore[arg-type]  # needs no instance state
    assert state["available"] is False and state["reason"] == SIMULATOR_REASON
    assert SIMULATOR_REASON in devices_section([{"kind": "simulator", "serial": "simulator",
                                                 "state": {"start": state, "end": state}}])
    assert "stale-one" in known_issues_section({}, [{"id": "stale-one", "source": "k.yaml",
                                                     "tests": ["t.py::x"]}], {})


# compare ----------------------------------------------------------------------------------------
def doc(tmp_path: Path, outcome: str = "xfailed", execute_ms: float = 20.0, rss_kb: int = 100_000,
        xpass_strict: bool = False) -> dict:
    failing = outcome in ("failed", "xfailed") and not xpass_strict
    run = entry(s1_result(tmp_path, fail=failing, rss_kb=rss_kb, execute_ms=execute_ms))
    run.update(outcome=outcome, known_issue="bug-1")
    return {"schema": SCHEMA, "tests": [
        {"nodeid": NODE, "outcome": outcome, "xpass_strict": xpass_strict, "known_issue": "bug-1"},
        {"nodeid": NODE + "_other", "outcome": "passed", "xpass_strict": False}],
        "runs": [run]}


def test_compare_same_outcomes_is_clean(tmp_path):
    c = compare(doc(tmp_path), doc(tmp_path, execute_ms=24.0, rss_kb=101_000))
    assert not c.regression and c.matched_runs == 1 and c.matched_steps == 3
    assert "OK: no new failure" in render(c, "a", "b", "t")


def test_compare_finds_a_new_failure(tmp_path):
    new = doc(tmp_path, outcome="failed")
    c = compare(doc(tmp_path), new)
    assert c.regression and [t.nodeid for t in c.new_failures] == [NODE]
    assert c.new_failures[0].old == "xfailed" and "Error::Internal" in c.new_failures[0].detail
    text = render(c, "a", "b", "t")
    assert "NEW FAILURES (1)" in text and text.rstrip().endswith("REGRESSION")


def test_compare_an_xpass_strict_is_a_fixed_known_issue_not_a_regression(tmp_path):
    c = compare(doc(tmp_path), doc(tmp_path, outcome="failed", xpass_strict=True))
    assert not c.regression and [t.known_issue for t in c.fixed_known_issues] == ["bug-1"]
    assert "FIXED KNOWN ISSUES (XPASS(strict): remove the entry) (1)" in render(c, "a", "b", "t")


def test_compare_flags_slower_steps_and_more_memory_beyond_thresholds(tmp_path):
    old, slow = doc(tmp_path), doc(tmp_path, execute_ms=60.0, rss_kb=130_000)
    c = compare(old, slow)
    assert c.regression
    times = [m for m in c.metrics if m.metric == "time"]
    assert [m.step for m in times] == ["2 execute(A.forward)", "3 execute(B.forward)",
                                       "5 execute(B.forward)"]
    assert {m.metric for m in c.metrics} == {"time", "peak Rss", "peak Pss"}
    assert times[0].growth == "+40.0 ms (+200%)"
    assert not compare(old, slow, time_threshold=3, memory_threshold_kb=40_000).regression
    assert not compare(old, slow, time_min_ms=50, memory_threshold_kb=40_000).regression
    # Within the default: the runtime's own launch-to-launch span (five 5.46 MB levels).
    assert not compare(old, doc(tmp_path, rss_kb=121_900)).regression


def test_compare_skips_steps_that_are_not_the_same_step_any_more(tmp_path):
    old, new = doc(tmp_path), doc(tmp_path, execute_ms=80.0)
    for step in new["runs"][0]["steps"]:
        step["target"] = step["target"].replace("forward", "other")
    assert compare(old, new).matched_steps == 0


def test_compare_cli_exit_status_and_schema_check(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(doc(tmp_path)))
    b.write_text(json.dumps(doc(tmp_path, outcome="failed")))
    assert compare_main([str(a), str(a)]) == 0
    assert compare_main([str(a), str(b)]) == 1
    assert "NEW FAILURES (1)" in capsys.readouterr().out
    b.write_text(json.dumps({"schema": "something-else/9"}))
    assert compare_main([str(a), str(b)]) == 2
    assert "expected 'executorch-hil-results/1'" in capsys.readouterr().err
    with pytest.raises(ResultsError, match="no such file"):
        load_results(tmp_path / "missing")


@pytest.mark.parametrize("spoil, field", [
    (lambda d: d["tests"][0].pop("nodeid"), "tests.0.nodeid"),
    (lambda d: d["tests"][0].update(outcome=3), "tests.0.outcome"),
    (lambda d: d.update(tests={"nodeid": "x"}), "tests"),
    (lambda d: d["runs"][0]["steps"][2].update(elapsed_ms="slow"), "runs.0.steps.2.elapsed_ms"),
    (lambda d: d["runs"][0].update(failures=[{"message": "no kind"}]), "runs.0.failures.0.kind"),
    (lambda d: d["runs"][0]["steps"][0].update(memory={"rss_kb": "big"}),
     "runs.0.steps.0.memory.rss_kb"),
])
def test_compare_a_results_file_with_wrong_fields_is_an_error_naming_the_field(
        tmp_path, capsys, spoil, field):
    """Exit 2 (cannot read), not a traceback and exit 1 (the regression status)."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(doc(tmp_path)))
    spoilt = doc(tmp_path)
    spoil(spoilt)
    bad.write_text(json.dumps(spoilt))
    assert compare_main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert field in err and "but not its fields" in err, err


def test_compare_a_results_file_that_is_not_utf8_is_an_error(tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(doc(tmp_path)))
    bad.write_bytes(json.dumps(doc(tmp_path)).encode().replace(b'"passed"', b'"pa\xffssed"'))
    assert compare_main([str(bad), str(good)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_a_report_directory_claimed_by_a_live_session_is_left_to_it(tmp_path):
    """--hil-report DIR of a live session: the next one writes beside it and says so; a claim
    whose process is gone, or that is not a claim, is taken over."""
    import subprocess

    from harness.devices.lease import host_boot_id, pid_start
    from harness.report.claim import CLAIM, claim

    report = tmp_path / "report"
    assert claim(report) == (report, "")
    assert claim(report) == (report, "")  # this process's own claim
    other = subprocess.Popen(["sleep", "30"])
    try:
        (report / CLAIM).write_text(json.dumps({"pid": str(other.pid),
                                                "start": pid_start(other.pid),
                                                "boot": host_boot_id()}))
        beside, notice = claim(report)
        assert beside != report and beside.name.startswith("report-") and beside.is_dir()
        assert f"--hil-report {report} belongs to a live session (pid {other.pid}" in notice
    finally:
        other.kill()
        other.wait()
    assert claim(report) == (report, "")  # its owner is gone
    (report / CLAIM).write_text("[not a claim")
    assert claim(report) == (report, "")
