"""`python -m harness compare OLD NEW`: what changed between two runs' results.json.

Prints a plain-text table of

- new failures: tests that fail (or error) in NEW and did not in OLD (or did not exist);
- fixed known issues: tests that are an XPASS(strict) failure in NEW, i.e. a known issue that
  no longer fails (remove its entry); reported, but not a regression;
- fixed failures: tests that failed in OLD and no longer do (information);
- metrics beyond thresholds, matched by test node id + scenario name + step index:
  * time: the median `elapsed_ms` of a `load_method` or `execute` step (or such a sub-step of
    a `parallel` step) over the runs of that scenario in that test grew by more than
    `--time-threshold` (relative, default 0.5 = +50%) AND by more than `--time-min-ms`
    (absolute, default 10 ms: steps of a fraction of a millisecond jitter by more than 50%
    between any two runs);
  * memory: the median over those runs of the peak (over the steps) Rss, Pss or dma-buf grew
    by more than `--memory-threshold-kb` (absolute, default 24576 kB: the runtime's peak is
    not the same from launch to launch of one scenario: on the simulator S1's peak Rss took
    one of five levels 5.46 MB apart in 40 identical launches, a span of 21.9 MB, with a
    process per scenario and as forks alike, and a two-level difference between two CI runs
    was reported as a regression under the earlier 8 MiB default. Leaks are the assertions'
    business, per scenario, with the SoC configs' allowance).

Times measured on a shared or busy host (the HTP simulator runs on the host CPU) move by
several times between identical runs; compare such runs with a looser `--time-threshold`.

Exit status 1 on a regression (a new failure or a metric beyond a threshold), 0 otherwise, 2
when a file cannot be read or is not an `executorch-hil-results/1` document.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from typing import Any

from harness.results import TIMED_OPS, ResultsError, load_results, run_peaks

DEFAULT_TIME_THRESHOLD = 0.5
DEFAULT_TIME_MIN_MS = 10.0
DEFAULT_MEMORY_THRESHOLD_KB = 24576
BAD = ("failed", "error")
MEMORY_METRICS = (("rss_kb", "peak Rss", 1), ("pss_kb", "peak Pss", 1),
                  ("dmabuf_bytes", "peak dma-buf", 1024),
                  ("dsp_heap_bytes", "peak DSP heap", 1024))  # last: units per kB


@dataclasses.dataclass(frozen=True)
class TestChange:
    nodeid: str
    old: str  # outcome in OLD ("absent" when the test was not there)
    new: str
    known_issue: str | None
    detail: str


@dataclasses.dataclass(frozen=True)
class MetricChange:
    nodeid: str
    scenario: str
    step: str  # "3 execute(A.forward)", "2.1 load_method(B.forward)", or "" for a whole run
    metric: str
    old: float
    new: float
    unit: str

    @property
    def growth(self) -> str:
        rel = f" ({(self.new - self.old) / self.old:+.0%})" if self.old else ""
        return f"{self.new - self.old:+.1f} {self.unit}{rel}"


@dataclasses.dataclass
class Comparison:
    new_failures: list[TestChange]
    fixed_known_issues: list[TestChange]
    fixed_failures: list[TestChange]
    metrics: list[MetricChange]
    only_old: list[str]
    only_new: list[str]
    matched_runs: int
    matched_steps: int

    @property
    def regression(self) -> bool:
        return bool(self.new_failures or self.metrics)


def compare(old: dict[str, Any], new: dict[str, Any],
            time_threshold: float = DEFAULT_TIME_THRESHOLD,
            time_min_ms: float = DEFAULT_TIME_MIN_MS,
            memory_threshold_kb: float = DEFAULT_MEMORY_THRESHOLD_KB) -> Comparison:
    old_tests = {t["nodeid"]: t for t in old.get("tests", [])}
    new_tests = {t["nodeid"]: t for t in new.get("tests", [])}
    new_failures, fixed_issues, fixed = [], [], []
    for nodeid, test in new_tests.items():
        before = old_tests.get(nodeid)
        was = before["outcome"] if before else "absent"
        now = test["outcome"]
        issue = test.get("known_issue") or (before or {}).get("known_issue")
        if now in BAD and test.get("xpass_strict"):
            if not (before and before.get("xpass_strict")):
                fixed_issues.append(TestChange(nodeid, was, "XPASS(strict)", issue,
                                               "the known issue no longer fails: remove its entry"))
        elif now in BAD and (was not in BAD or (before or {}).get("xpass_strict")):
            new_failures.append(TestChange(nodeid, was, now, issue, _why(test, new)))
        elif was in BAD and now not in BAD and not (before or {}).get("xpass_strict"):
            fixed.append(TestChange(nodeid, was, now, issue, ""))
    metrics, runs, steps = _metrics(old, new, time_threshold, time_min_ms, memory_threshold_kb)
    return Comparison(new_failures, fixed_issues, fixed, metrics,
                      sorted(set(old_tests) - set(new_tests)),
                      sorted(set(new_tests) - set(old_tests)), runs, steps)


def _why(test: dict[str, Any], doc: dict[str, Any]) -> str:
    """The first failure of a test: the failing run's first failure, else the test's own."""
    for run in doc.get("runs", []):
        if run["nodeid"] == test["nodeid"] and run.get("failures"):
            f = run["failures"][0]
            return f"{f['kind']} in {run['scenario']} step {f['step']} {f['where']}: " \
                   f"{_first_line(f['message'])}"
    failure = test.get("failure")
    if failure:
        return f"{failure['kind']}: {_first_line(failure['message'])}"
    return _first_line(test.get("message") or "")


def _grouped(doc: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in doc.get("runs", []):
        groups.setdefault((run["nodeid"], run["scenario"]), []).append(run)
    return groups


def _step_times(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """(step label, target) -> elapsed_ms of that step over the runs, for timed ops."""
    out: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for step in run.get("steps", []):
            items = [(str(step["index"]), step)]
            if step.get("op") == "parallel":
                items = [(f"{step['index']}.{k}", sub)
                         for k, sub in enumerate(step.get("substeps") or [])]
            for label, s in items:
                if s.get("op") in TIMED_OPS and isinstance(s.get("elapsed_ms"), (int, float)):
                    target = s.get("target") or f"{s['op']}({s.get('module')}.{s.get('method')})"
                    out.setdefault((label, target), []).append(float(s["elapsed_ms"]))
    return out


def _metrics(old: dict[str, Any], new: dict[str, Any], time_threshold: float, time_min_ms: float,
             memory_threshold_kb: float) -> tuple[list[MetricChange], int, int]:
    changes: list[MetricChange] = []
    old_groups, new_groups = _grouped(old), _grouped(new)
    matched_runs = matched_steps = 0
    for key, new_runs in new_groups.items():
        old_runs = old_groups.get(key)
        if not old_runs:
            continue
        matched_runs += min(len(old_runs), len(new_runs))
        nodeid, scenario = key
        old_times, new_times = _step_times(old_runs), _step_times(new_runs)
        for (label, target), values in new_times.items():
            before = old_times.get((label, target))
            if not before:
                continue  # the step is not the same step any more
            matched_steps += 1
            a, b = statistics.median(before), statistics.median(values)
            if b - a > time_min_ms and b > a * (1 + time_threshold):
                changes.append(MetricChange(nodeid, scenario, f"{label} {target}", "time",
                                            a, b, "ms"))
        for field, name, per_kb in MEMORY_METRICS:
            old_peak = _median([run_peaks(r)[field] for r in old_runs])
            new_peak = _median([run_peaks(r)[field] for r in new_runs])
            if (old_peak is not None and new_peak is not None
                    and (new_peak - old_peak) / per_kb > memory_threshold_kb):
                unit = "kB" if per_kb == 1 else "bytes"
                changes.append(MetricChange(nodeid, scenario, "", name, old_peak, new_peak, unit))
    return changes, matched_runs, matched_steps


def _median(values: list[Any]) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


# Text -------------------------------------------------------------------------------------------
def render(c: Comparison, old_name: str, new_name: str, thresholds: str) -> str:
    out = [f"compare {old_name} -> {new_name}",
           f"matched {c.matched_runs} scenario runs, {c.matched_steps} timed steps; "
           f"thresholds: {thresholds}", ""]

    def section(title: str, header: list[str], rows: list[list[str]]) -> None:
        out.append(f"{title} ({len(rows)})")
        if rows:
            out.append(_table(header, rows))
        out.append("")

    section("NEW FAILURES", ["test", "old", "new", "known issue", "first failure"],
            [[t.nodeid, t.old, t.new, t.known_issue or "-", t.detail] for t in c.new_failures])
    section("FIXED KNOWN ISSUES (XPASS(strict): remove the entry)", ["test", "old", "known issue"],
            [[t.nodeid, t.old, t.known_issue or "-"] for t in c.fixed_known_issues])
    section("METRICS BEYOND THRESHOLDS", ["test", "scenario", "step", "metric", "old", "new",
                                          "change"],
            [[m.nodeid, m.scenario, m.step or "(whole run)", m.metric, f"{m.old:.1f}",
              f"{m.new:.1f}", m.growth] for m in c.metrics])
    if c.fixed_failures:
        section("NO LONGER FAILING", ["test", "old", "new"],
                [[t.nodeid, t.old, t.new] for t in c.fixed_failures])
    if c.only_old or c.only_new:
        out.append(f"tests only in OLD: {len(c.only_old)}; only in NEW: {len(c.only_new)}")
    out.append("REGRESSION" if c.regression else "OK: no new failure, no metric beyond thresholds")
    return "\n".join(out)


def _table(header: list[str], rows: list[list[str]], limit: int = 120) -> str:
    rows = [[_clip(c, limit) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness compare",
        description="Compare two runs' results.json (written by pytest --hil-report DIR): new "
                    "failures, fixed known issues, load/execute time and peak memory beyond "
                    "thresholds. Exit 1 on a regression.")
    parser.add_argument("old", help="OLD results.json (or the --hil-report directory)")
    parser.add_argument("new", help="NEW results.json (or the --hil-report directory)")
    parser.add_argument("--time-threshold", type=float, default=DEFAULT_TIME_THRESHOLD,
                        metavar="FRACTION",
                        help="relative growth of a step's median load/execute time that counts "
                             f"(default {DEFAULT_TIME_THRESHOLD}: +50%%)")
    parser.add_argument("--time-min-ms", type=float, default=DEFAULT_TIME_MIN_MS, metavar="MS",
                        help="...and the absolute growth it must also exceed (default "
                             f"{DEFAULT_TIME_MIN_MS:g} ms)")
    parser.add_argument("--memory-threshold-kb", type=float, default=DEFAULT_MEMORY_THRESHOLD_KB,
                        metavar="KB",
                        help="growth of a scenario's median peak Rss, Pss or dma-buf that counts "
                             f"(default {DEFAULT_MEMORY_THRESHOLD_KB} kB)")
    args = parser.parse_args(argv)
    try:
        old, new = load_results(args.old), load_results(args.new)
    except ResultsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = compare(old, new, args.time_threshold, args.time_min_ms, args.memory_threshold_kb)
    thresholds = (f"time +{args.time_threshold:.0%} and +{args.time_min_ms:g} ms, memory "
                  f"+{args.memory_threshold_kb:g} kB")
    print(render(result, args.old, args.new, thresholds))
    return 1 if result.regression else 0
