"""The soak's parts: the malloc reading, the fit of growth per cycle, its bound and the words a
known issue matches, the reports it reaches, `load_mode` in the protocol and the exports, and
--soak-cycles (tests/hil/test_soak.py runs the soaks). The runners' load modes on the
simulator: test_load_modes.py."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness.export.plan import ExportError, Plan, PlanStep
from harness.export.cpp import render as render_cpp
from harness.export.python import export_python
from harness.programs.compile import CompiledModel, MethodReference
from harness.protocol.scenario_file import LOAD_MODES, ScenarioError
from harness.protocol.scenario_check import validate_scenario
from harness.protocol.memory import read_heap
from harness.results import junit_properties, run_entry
from harness.results.assertions import assert_soak_bounded
from harness.results.failures import HilFailure
from harness.protocol.output import RunOutput
from harness.results.run import ScenarioResult
from harness.results.soak import (BOUNDED, LEAK, UNDECIDED, Slope, fit, soak_fit, soak_schedule,
                                   soak_verdict, undecided, verdict)
from harness.scenario import Scenario
from harness.scenario.library import SOAK_SHAPES, soak

ROOT = Path(__file__).resolve().parents[2]


def model(tmp_path: Path, methods=("forward",)) -> CompiledModel:
    return CompiledModel("m", "xnnpack", "SM8650", "fp32", tmp_path / "m.pte",
                         {m: MethodReference((), ()) for m in methods}, 0, 0)


def soaked(tmp_path: Path, readings: list[tuple[int, int]]) -> ScenarioResult:
    """A one-module soak of len(readings) cycles whose cycle ends read (Rss kB, malloc B)."""
    sc = soak(model(tmp_path), len(readings))
    ends = {index: k for label, index in sc.labels.items() for k in [int(label[5:])]}
    events = []
    for i, step in enumerate(sc.steps):
        rss, heap = readings[ends[i]] if i in ends else (1000, 1000)
        events.append("HARNESS_EVENT " + json.dumps({
            "event": "step", "index": i, "op": step.op, "status": "ok", "trace_offset": 0,
            "memory": {"rollup": {"Rss": rss}, "dmabuf": {"count": 0, "bytes": 0},
                       "heap": {"in_use": heap, "mmapped": 0, "arena": heap}}}))
    events.append('HARNESS_EVENT {"event": "end"}')
    return ScenarioResult.build(sc, RunOutput(0, "\n".join(events), ""), [])


def test_the_python_runner_reads_malloc_as_the_native_one():
    before = read_heap()
    assert before is not None and set(before) == {"in_use", "mmapped", "arena"}
    kept = [bytearray(1000) for _ in range(1000)]  # below the mmap threshold: arena bytes
    after = read_heap()
    assert after is not None and after["in_use"] - before["in_use"] >= 1000 * 1000
    del kept


def test_the_fit_is_the_median_slope_and_ignores_a_step_reading():
    steady = fit([100.0 + 50 * k for k in range(20)], "B")
    assert steady.per_cycle == pytest.approx(50) and steady.low == pytest.approx(50)
    # Rss as it reads: flat, with one mapping of 5 MB handed back in some cycles only
    stepped = fit([39000.0 if k % 4 else 33500.0 for k in range(20)], "kB")
    assert abs(stepped.per_cycle) < 1 and stepped.low <= 0 <= stepped.high
    with pytest.raises(ValueError):
        fit([1.0], "B")


def test_the_soak_labels_each_cycle_end_after_its_last_destroy(tmp_path):
    for shape in SOAK_SHAPES:
        sc = soak(model(tmp_path, ("prefill", "decode")), 3, shape, "File")
        ends = [sc.labels[f"cycle{k}"] for k in range(3)]
        assert all(sc.steps[i].op == "destroy_module" for i in ends), shape
        loads = [s for s in sc.steps if s.op == "load_module"]
        assert loads and all(s.args["load_mode"] == "File" for s in loads)
        sc.to_json()  # validated as runners read it
    with pytest.raises(ScenarioError, match="soak shape"):
        soak(model(tmp_path), 3, "three_modules")
    with pytest.raises(ScenarioError, match="load_mode"):
        Scenario("x").load_module("A", model(tmp_path), load_mode="mmap")


def test_growth_above_the_bound_fails_with_the_words_a_known_issue_matches(tmp_path):
    leaking = soaked(tmp_path, [(39000, 4_000_000 + 1870 * k) for k in range(12)])
    with pytest.raises(HilFailure) as raised:
        assert_soak_bounded(leaking, 64, 1024)
    assert raised.value.failure.kind == "check"
    assert raised.value.failure.message.startswith(
        "memory grows per load/destroy cycle: malloc in use grows +1870.0 B/cycle")
    assert "cycle  11" in str(raised.value)  # the readings, for the report
    assert leaking.soak["malloc_in_use_bytes"]["per_cycle"] == pytest.approx(1870)
    flat = soaked(tmp_path, [(39000 if k % 3 else 33500, 4_000_000) for k in range(12)])
    fitted = assert_soak_bounded(flat, 64, 1024)
    assert fitted.heap is not None and fitted.heap.per_cycle == 0 and fitted.cycles == 12
    with pytest.raises(AssertionError, match="fewer than 3"):
        soak_fit(soaked(tmp_path, [(1, 1)] * 4))


def test_the_fit_reaches_results_json_and_the_junit_properties(tmp_path):
    result = soaked(tmp_path, [(39000, 4_000_000 + 100 * k) for k in range(10)])
    assert_soak_bounded(result, 64, 1024)
    entry = run_entry(result, [], nodeid="t", index=0, occurrence=0, device="simulator")
    assert entry["soak"]["cycles"] == 10 and entry["soak"]["warmup"] == 2
    props = dict(junit_properties({"metrics": {"scenarios": 1, "failed_scenarios": 0},
                                   "runs": [entry]}))
    assert props["hil.soak.soak_one_module.malloc_in_use_bytes_per_cycle"].startswith(
        "100.0 (95 % 100.0 .. 100.0) over 8 cycles")
    assert "hil.soak.soak_one_module.rss_kb_per_cycle" in props


def test_the_protocol_takes_the_four_load_modes_and_no_other():
    base = {"op": "load_module", "module": "A", "pte": "p.pte"}
    for mode in LOAD_MODES:
        assert validate_scenario({"steps": [base | {"load_mode": mode}]}).steps[0].load_mode == mode
    assert validate_scenario({"steps": [base]}).steps[0].load_mode == "MmapUseMlockIgnoreErrors"
    with pytest.raises(ScenarioError, match="load_mode"):
        validate_scenario({"steps": [base | {"load_mode": "file"}]})


def plan(mode: str) -> Plan:
    step = PlanStep(0, "load_module", "A", None, "load_module(A)", False, -1, program="m.pte",
                    load_mode=mode)
    return Plan("modes", Path("."), [step], {}, ["A"])


def test_the_exports_keep_the_load_mode(tmp_path):
    assert '"m.pte", "File", false);' in render_cpp(plan("File"))
    with pytest.raises(ExportError, match=r"load_mode File.*export it as cpp"):
        export_python(plan("File"), tmp_path / "py")
    script = export_python(plan("MmapUseMlockIgnoreErrors"), tmp_path / "ok")
    assert "'MmapUseMlockIgnoreErrors'" in (script / "test_modes.py").read_text()


def test_soak_cycles_below_the_fit_are_a_usage_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "pytest", "--soak-cycles", "3",
                          "tests/hil/test_soak.py", "--collect-only", "-q", "-p",
                          "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    assert "--soak-cycles: must be at least 5 (2 warm-up cycles and 3 to fit), got 3" in run.stderr


def noisy(slope: float, cycles: int = 18) -> list[tuple[int, int]]:
    """Readings growing `slope` B/cycle with +-400 B of noise (the same noise every time)."""
    r = random.Random(7)
    return [(39000, round(4_000_000 + slope * k + r.uniform(-400, 400))) for k in range(cycles)]


def test_a_soak_is_decided_on_its_interval_not_its_point_estimate(tmp_path):
    """The control that failed by noise: +1045 B/cycle whose interval holds the bound of 1024
    is neither a leak nor bounded (it failed, and would as often have passed); a leak needs the
    interval's lower end above the bound, bounded its upper end at or below it."""
    straddling = soaked(tmp_path, noisy(1045))
    fitted = assert_soak_bounded(straddling, 64, 1024)  # no failure: not decided a leak
    assert fitted.heap is not None and fitted.heap.low < 1024 < fitted.heap.per_cycle
    assert fitted.verdict == UNDECIDED and straddling.soak["verdict"] == UNDECIDED
    why = undecided(fitted, 64, 1024, runs=3)
    assert "undecided after 3 runs" in why and "malloc in use +1055.7 B/cycle (95 % +1023.4" in why and "1024" in why
    assert "Rss" not in why  # Rss is decided (flat)
    with pytest.raises(HilFailure, match="whole interval above the bound of 1024"):
        assert_soak_bounded(soaked(tmp_path, noisy(1300)), 64, 1024)
    assert assert_soak_bounded(soaked(tmp_path, noisy(700)), 64, 1024).verdict == BOUNDED
    # the rule itself, on its edges
    at = Slope(1000, 1000, 1024, "B", 0, 0)
    assert verdict(at, 1024) == BOUNDED and verdict(at, 1010) == UNDECIDED
    assert verdict(at, 999) == LEAK
    assert soak_verdict(at, at, 999, 2000) == LEAK
    assert soak_verdict(at, None, 1024, 0) == BOUNDED
    assert soak_verdict(at, at, 1024, 1010) == UNDECIDED


def test_an_undecided_soak_runs_longer_a_bounded_number_of_times():
    assert soak_schedule(16, 2) == [16, 30, 58]
    assert soak_schedule(40, 24) == [40, 56, 88]  # the Python runner's warm-up kept
    assert soak_schedule(16, 2, extensions=0) == [16]
    # more cycles narrow the interval until it clears the bound
    long_fit = fit([4_000_000 + 1045 * k + random.Random(k).uniform(-400, 400)
                    for k in range(56)], "B")
    assert verdict(long_fit, 1024) == LEAK
