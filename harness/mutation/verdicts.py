"""A mutant's verdict: which tests its pass must run, and what their outcomes mean.

Compared with the unmutated run of the same tests (both results.json documents of
`--hil-report`): **killed** when some test that did not fail unmutated fails now with no known
issue excusing it, or (on a fix model) a test the fix turned XPASS(strict) is no longer one;
**masked** when a failure was excused by a known issue although the defect is the mutant's (a
defect of the known-issue matcher, never a kill); **survived** when nothing changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any

from harness.errors import HarnessError
from harness.runtime.mutants import Mutant

STAGES = (("tests/hil/test_isolation.py",),
          ("tests/hil/test_stateful.py", "tests/hil/test_decode_loop.py",
           "tests/hil/test_concurrent_execute.py", "tests/hil/test_soak.py"),
          ("",))
"""A mutant's tests run in stages, cheapest first, and the next stage only while it survives:
most defects show in the isolation suite in seconds; "" is every test not in an earlier stage."""
TIME_THRESHOLD, TIME_MIN_MS = 3.0, 250.0
"""A latency regression is killed by `harness compare`'s step times: a median load or execute
over four times the unmutated run's and 250 ms more (far beyond this machine's noise, which
moves single steps by several times but not by a quarter of a second at the median)."""
LATENCY = "latency regression"
"""The catalogue class whose mutants step times may kill. Any other mutant is killed by a
verdict only: under a load of 18 a race test that waits on purpose ran a step 276 ms slower
beside a mutant that adds no time, and such a "kill" would score a defect the suites missed."""
FAILED = ("failed", "error")
RACES = ("tests/hil/test_concurrent_execute.py::", "tests/hil/test_concurrency.py::")
"""Tests of races: which ending a run meets (a crash, a freed handle, an error at another step)
moves from run to run with nothing injected, so an XFAIL there that failed in other places
than unmutated is the race's luck, not a defect excused (their passes and new failures still
count)."""
VERDICTS = ("killed", "masked", "survived", "not reached", "equivalent")


@dataclasses.dataclass
class Outcome:
    """One mutant's pass: its verdict, the tests that killed it and the known issues that
    excused it."""

    mutant: Mutant
    verdict: str = "survived"  # killed, masked, survived, not reached, equivalent
    killed_by: list[str] = dataclasses.field(default_factory=list)
    masked_by: list[str] = dataclasses.field(default_factory=list)  # "nodeid (issue)"
    tests_run: int = 0
    seconds: float = 0.0
    exit_status: int | None = None

    def entry(self) -> dict[str, Any]:
        m = self.mutant
        return {"name": m.name, "class": m.kind, "boundary": m.boundary, "spec": m.spec,
                "description": m.description, "verdict": self.verdict,
                "killed_by": self.killed_by, "masked_by": self.masked_by,
                "tests_run": self.tests_run, "seconds": round(self.seconds, 1),
                "exit_status": self.exit_status}


def _reaching(baseline: dict, mutant: Mutant) -> set[str]:
    """The tests some unmutated run of which loaded a program of the mutant's backend."""
    return {r["nodeid"] for r in baseline.get("runs", [])
            if mutant.backend in {m.get("backend") for m in r.get("modules", {}).values()}}


def reachable(baseline: dict, mutant: Mutant) -> list[str]:
    """The tests whose unmutated runs loaded a program of the mutant's backend, in the
    unmutated run's order (the cheap suites first is the caller's choice of arguments),
    but for those that failed unmutated: a failure there cannot be the mutant's (on a fix
    model the seed's XPASS(strict) fail by design), and under `-x` it would end the pass
    before any test that can kill it ran."""
    ran = _reaching(baseline, mutant)
    return [t["nodeid"] for t in baseline["tests"]
            if t["nodeid"] in ran and t["outcome"] not in FAILED]


def fixed(baseline: dict, mutant: Mutant) -> list[str]:
    """The reachable tests that were XPASS(strict) unmutated: on a fix model, the cells the fix
    turned; a mutant that brings their bug back changes them. They fail by design, so they run
    in a stage of their own without -x, after the named STAGES and before the rest."""
    ran = _reaching(baseline, mutant)
    return [t["nodeid"] for t in baseline["tests"]
            if t["nodeid"] in ran and t.get("xpass_strict")]


def _failure_shapes(doc: dict) -> dict[str, set]:
    """Per test, the (scenario, failure kind, step) of every failure of its runs."""
    out: dict[str, set] = {}
    for run in doc.get("runs", []):
        for f in run.get("failures", []):
            out.setdefault(run["nodeid"], set()).add((run["scenario"], f["kind"], f["step"]))
    return out


def stages(tests: list[str]) -> list[list[str]]:
    """`tests` split into STAGES (by file), in order, empty stages left out."""
    out: list[list[str]] = []
    taken: set[str] = set()
    for files in STAGES:
        stage = [t for t in tests if t not in taken
                 and any(t.startswith(f + "::") if f else True for f in files)]
        taken.update(stage)
        if stage:
            out.append(stage)
    return out


def judge(mutant: Mutant, baseline: dict, mutated: dict) -> Outcome:
    """A mutant's verdict from its pass against the unmutated run (the module docstring), and,
    for a latency regression (LATENCY), a step time beyond TIME_THRESHOLD (`harness compare`)
    outside the race tests (which wait on purpose) as its kill."""
    from harness.results.compare import compare

    before = {t["nodeid"]: t for t in baseline["tests"]}
    outcome = Outcome(mutant, tests_run=len(mutated["tests"]))
    slower = [c for c in compare(baseline, mutated, TIME_THRESHOLD, TIME_MIN_MS,
                                 float("inf")).metrics
              if c.metric == "time" and mutant.kind == LATENCY and not c.nodeid.startswith(RACES)]
    outcome.killed_by += [f"harness compare: {c.nodeid} {c.scenario} {c.step} {c.growth}"
                          for c in slower[:3]]
    shapes_before, shapes_after = _failure_shapes(baseline), _failure_shapes(mutated)
    for test in mutated["tests"]:
        nodeid, now = test["nodeid"], test["outcome"]
        was = before.get(nodeid, {}).get("outcome")
        if before.get(nodeid, {}).get("xpass_strict") and not test.get("xpass_strict"):
            # fixed unmutated (a fix model's XPASS(strict)): the bug is back, or worse
            outcome.killed_by.append(f"{nodeid} (fixed unmutated, {now} now)")
        elif now in FAILED and not test.get("xpass_strict") and was not in FAILED:
            outcome.killed_by.append(nodeid)
        elif now == "xfailed" and (was == "passed" or (
                was == "xfailed" and not nodeid.startswith(RACES)
                and shapes_after.get(nodeid, set()) - shapes_before.get(nodeid, set()))):
            outcome.masked_by.append(f"{nodeid} ({test.get('known_issue')})")
    if outcome.masked_by:
        outcome.verdict = "masked"
    elif outcome.killed_by:
        outcome.verdict = "killed"
    return outcome


def sample(mutants: list[Mutant], size: int, key: str) -> list[Mutant]:
    """`size` mutants chosen by `key` (CI gives the commit): a window over the catalogue in a
    fixed shuffled order that moves with the key, so every mutant runs over a few commits."""
    if size <= 0 or size >= len(mutants):
        return mutants
    order = sorted(mutants, key=lambda m: hashlib.sha256(m.name.encode()).hexdigest())
    start = int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(order)
    return [order[(start + i) % len(order)] for i in range(size)]


def table(outcomes: list[Outcome]) -> str:
    rows = [("mutant", "class", "verdict", "killed by / masked by")]
    for o in outcomes:
        who = (o.masked_by or o.killed_by or ["-"])[0].split("::")[-1]
        more = len(o.masked_by or o.killed_by) - 1
        rows.append((o.mutant.name, o.mutant.kind, o.verdict, who + (f" (+{more})" if more > 0 else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}"
                     for r in rows)


def score(outcomes: list[Outcome]) -> float:
    """Killed over every mutant but the equivalent ones (which no test can kill)."""
    scored = [o for o in outcomes if o.verdict != "equivalent"]
    return sum(o.verdict == "killed" for o in scored) / len(scored) if scored else 1.0


def select(mutants: list[Mutant], names: list[str], size: int, key: str) -> list[Mutant]:
    """The mutants named (all when none is), then a sample of `size` chosen by `key`; a name
    the catalogue does not have is an error, never a mutant that silently runs nothing."""
    if names:
        known = {m.name: m for m in mutants}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise HarnessError(f"no mutant {', '.join(unknown)} in the catalogue "
                               "(python -m harness mutate --list)")
        mutants = [known[n] for n in names]
    return sample(mutants, size, key)


def document(outcomes: list[Outcome], variant: str, args: list[str], seconds: float,
             baseline_seconds: float | None = None,
             load_start: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """mutate.json (and results.json's `mutation`): the score, the counts and every mutant,
    with the host's load average at the start (when given) and now: on a shared host the
    seconds move with it several times over, so a time is read beside its load."""
    load = {"start": None if load_start is None else [round(x, 2) for x in load_start],
            "end": [round(x, 2) for x in os.getloadavg()]}
    return {"variant": variant, "args": args, "seconds": round(seconds, 1),
            "baseline_seconds": None if baseline_seconds is None else round(baseline_seconds, 1),
            "load_average": load,
            "score": score(outcomes),
            **{k: sum(o.verdict == k for o in outcomes) for k in ("killed", "masked", "survived")},
            "not_reached": sum(o.verdict == "not reached" for o in outcomes),
            "equivalent": sum(o.verdict == "equivalent" for o in outcomes),
            "mutants": [o.entry() for o in outcomes]}


def score_line(doc: dict[str, Any]) -> str:
    """The one-line summary the command and the pytest option print."""
    return (f"score {doc['score']:.0%}: {doc['killed']} killed, {doc['masked']} masked, "
            f"{doc['survived']} survived, {doc['not_reached']} not reached, "
            f"{doc['equivalent']} equivalent, of {len(doc['mutants'])} mutants on "
            f"{doc['variant']} in {doc['seconds']:.0f} s"
            + (f" (load average {doc['load_average']['end'][0]:.1f} at the end)"
               if doc.get("load_average") else ""))


def passes(doc: dict[str, Any], floor: float) -> bool:
    """A mutation run passes when its score reaches `floor` and no mutant is masked."""
    return doc["score"] >= floor and not doc["masked"]
