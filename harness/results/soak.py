"""Growth per load/destroy cycle: a soak run's memory readings fitted as a slope with its spread.

A soak scenario (harness.scenario.library.soak) labels the step that ends each cycle
`cycle<k>`, when every module of the cycle has been destroyed. Two series are read there:
- Rss (smaps_rollup, kB): what the process holds from the kernel. It moves in steps of whole
  mappings (a freed 5 MB buffer handed back, or not, in any cycle), so single readings say
  little and a least-squares line follows the steps;
- malloc's bytes in use in its arenas (mallinfo2 `uordblks`, the protocol's `heap.in_use`):
  what the runtime and its libraries allocated and did not free, byte-exact.
Each is fitted with the Theil-Sen estimator (scipy.stats.theilslopes): the median of the
slopes between every two cycles, with its 95 % confidence interval as the spread. A median
ignores the step readings a mean would follow, and the interval says how sure the slope is.
The first cycles are left out (`warmup`): they load the libraries, fill caches and pools that
later cycles reuse, which is start-up, not growth.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from harness.results.run import ScenarioResult

_CYCLE = re.compile(r"^cycle(\d+)$")
DEFAULT_WARMUP = 2
"""Cycles left out of the fit: on the simulator the heap grows in the first two cycles only
for a program that leaks nothing (kv_cache_xnn: +720 B, +720 B, then 0 for 27 cycles)."""
MIN_FITTED = 3
PYTHON_RUNNER_WARMUP = 24
"""Warm-up cycles on the Python runner, whose malloc count holds the interpreter's and
pybind11's own tables too: they grow for tens of cycles before they settle (xnn_shared_weights,
two modules: +3.8 kB in cycle 2, +1.6 kB around cycle 12, +0.2 kB from cycle 30 on), which the
native runner, with the runtime alone in its process, does not show (+0.05 kB per cycle)."""
PYTHON_RUNNER_FITTED = 16
"""Cycles the Python runner fits at least, after its warm-up."""


def soak_length(runner: str, cycles: int) -> tuple[int, int]:
    """(cycles to run, warm-up cycles) of a soak asked for `cycles` on `runner`: the Python
    runner runs its longer warm-up and then at least PYTHON_RUNNER_FITTED cycles."""
    if runner == "python":
        return max(cycles, PYTHON_RUNNER_WARMUP + PYTHON_RUNNER_FITTED), PYTHON_RUNNER_WARMUP
    return cycles, DEFAULT_WARMUP


@dataclasses.dataclass(frozen=True)
class Slope:
    """Growth per cycle (Theil-Sen), its 95 % interval, and the fitted readings."""

    per_cycle: float
    low: float
    high: float
    unit: str  # of the readings: "kB" or "B"
    first: float  # the first fitted reading
    last: float  # the last reading

    def describe(self) -> str:
        return (f"{self.per_cycle:+.1f} {self.unit}/cycle (95 % {self.low:+.1f} .. "
                f"{self.high:+.1f}; {self.first:.0f} -> {self.last:.0f} {self.unit})")

    def entry(self) -> dict[str, Any]:
        return {"per_cycle": round(self.per_cycle, 3), "low": round(self.low, 3),
                "high": round(self.high, 3), "unit": self.unit, "first": self.first,
                "last": self.last}


LEAK, BOUNDED, UNDECIDED = "leak", "bounded", "undecided"
SOAK_EXTENSIONS = 2
"""How often a soak whose interval straddles its bound runs again, each time with twice the
fitted cycles of the run before (so at most 4x the fitted cycles asked for)."""


def verdict(slope: Slope, bound: float) -> str:
    """A slope against its bound, decided on its 95 % interval and never on the point
    estimate alone: LEAK only when even the interval's lower end is above the bound, BOUNDED
    when its upper end is at or below it, UNDECIDED when it straddles the bound (a control at
    +1045 B/cycle, 95 % +960 .. +1120, against 1024 failed or passed by the noise of the run)."""
    if slope.low > bound:
        return LEAK
    if slope.high <= bound:
        return BOUNDED
    return UNDECIDED


def soak_verdict(rss: Slope, heap: Slope | None, rss_bound: float, heap_bound: float) -> str:
    """The soak's verdict over its two series: LEAK when either is decided a leak, BOUNDED
    when every series is decided bounded, else UNDECIDED."""
    found = [verdict(rss, rss_bound)] + ([verdict(heap, heap_bound)] if heap else [])
    if LEAK in found:
        return LEAK
    return BOUNDED if all(v == BOUNDED for v in found) else UNDECIDED


def soak_schedule(cycles: int, warmup: int, extensions: int = SOAK_EXTENSIONS) -> list[int]:
    """The cycles of each run of one soak until it is decided: the length asked for, then the
    same warm-up with the fitted cycles doubled, `extensions` times at most (bounded, so an
    undecided soak ends as UNDECIDED, never runs on)."""
    fitted = max(cycles - warmup, MIN_FITTED)
    return [warmup + fitted * 2 ** k for k in range(extensions + 1)]


@dataclasses.dataclass(frozen=True)
class SoakFit:
    scenario: str
    cycles: int  # cycles run
    warmup: int  # cycles left out of the fit
    rss: Slope
    heap: Slope | None  # None where the runner's C library gives no malloc reading
    verdict: str = ""  # LEAK, BOUNDED or UNDECIDED once judged against bounds (assertions)

    def entry(self) -> dict[str, Any]:
        """The run's `soak` entry in results.json."""
        found = {"cycles": self.cycles, "warmup": self.warmup, "rss_kb": self.rss.entry(),
                 "malloc_in_use_bytes": self.heap.entry() if self.heap else None}
        if self.verdict:
            found["verdict"] = self.verdict
        return found

    def describe(self) -> str:
        heap = self.heap.describe() if self.heap else "no malloc reading"
        return (f"{self.cycles} cycles ({self.warmup} warm-up): Rss {self.rss.describe()}; "
                f"malloc in use {heap}")


def fit(values: list[float], unit: str) -> Slope:
    """The Theil-Sen slope of `values` (one per cycle) with its 95 % interval."""
    from scipy.stats import theilslopes

    if len(values) < 2:
        raise ValueError(f"a slope needs two readings, got {len(values)}")
    res = theilslopes(values, range(len(values)), alpha=0.95)
    return Slope(float(res.slope), float(res.low_slope), float(res.high_slope), unit,
                 float(values[0]), float(values[-1]))


def cycle_steps(result: ScenarioResult) -> list[int]:
    """Step indices of the run's cycle ends, in cycle order."""
    ends = sorted((int(m.group(1)), index) for label, index in result.scenario.labels.items()
                  if (m := _CYCLE.match(label)))
    return [index for _, index in ends]


def soak_fit(result: ScenarioResult, warmup: int = DEFAULT_WARMUP) -> SoakFit:
    """The run's growth per cycle. AssertionError when it has too few cycles, or a cycle end
    without a reading (a runner that died in the middle is the run's failure, reported by
    assert_steps_ok before this)."""
    ends = cycle_steps(result)
    name = result.scenario.name
    if len(ends) - warmup < MIN_FITTED:
        raise AssertionError(f"scenario {name}: {len(ends)} cycles with {warmup} of warm-up "
                             f"leave fewer than {MIN_FITTED} to fit a slope to")
    rss: list[float] = []
    heap: list[float] = []
    for index in ends[warmup:]:
        memory = result.steps[index].memory
        value = (memory.get("rollup") or {}).get("Rss")
        if value is None:
            raise AssertionError(f"scenario {name}: no Rss reading at step {index} "
                                 f"({result.steps[index].step.describe()})")
        rss.append(float(value))
        in_use = (memory.get("heap") or {}).get("in_use")
        if in_use is not None:
            heap.append(float(in_use))
    found = SoakFit(name, len(ends), warmup, fit(rss, "kB"),
                    fit(heap, "B") if len(heap) == len(rss) else None)
    result.soak = found.entry()
    return found


def undecided(fitted: SoakFit, rss_bound: float, heap_bound: float, runs: int) -> str:
    """Why a soak has no verdict after `runs` runs of soak_schedule: every straddling slope
    with its interval and bound (the test reports it as undecided, neither pass nor fail)."""
    straddling = [f"{what} {slope.describe()} against {bound:g} {slope.unit}/cycle"
                  for what, slope, bound in (("Rss", fitted.rss, rss_bound),
                                             ("malloc in use", fitted.heap, heap_bound))
                  if slope is not None and verdict(slope, bound) == UNDECIDED]
    return (f"soak {fitted.scenario} undecided after {runs} runs (the last {fitted.cycles} "
            f"cycles, {fitted.warmup} of warm-up): the 95 % interval still straddles the "
            "bound: " + "; ".join(straddling) + ". Neither a leak nor bounded: run more "
            "--soak-cycles, or set the bound apart from this growth")
