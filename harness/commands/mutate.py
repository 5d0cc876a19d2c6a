"""`python -m harness mutate`: how much of the next bug the suites would catch.

    python -m harness mutate [--variant stock|fix-model|fix-model-serialized]
        [--mutant NAME ...] [--sample N [--rotate KEY]] [--out DIR] [--list] [pytest args]

Runs the pytest args (default: the simulator HIL suites, `tests/hil`) once on the runtime variant
unmutated, then once per mutant of the catalogue (harness/runtime/mutants.yaml) with that defect
injected, and compares each test's verdict with the unmutated run's:

- **killed**: some test that did not fail unmutated fails now, with no known issue excusing it,
  or (on a fix model) a test the fix turned XPASS(strict) is no longer one: the bug is back;
- **masked**: a test's failure was excused by a known issue although the defect is the mutant's
  (a test that passed unmutated is an XFAIL now, or an XFAIL whose runs failed in new ways is
  still one): a defect of the known-issue matcher, never a kill;
- **survived**: nothing failed that did not fail before.

Each mutant's pass runs only the tests that can reach it, by what the unmutated run shows (a
test none of whose runs loaded a program of the mutant's backend is left out), in stages
(STAGES: the isolation suite first), each stopping at the first kill (`-x`), the next stage only
while the mutant survives, and last the tests a fix model turned XPASS(strict) (without `-x`:
they fail by design): the unmutated run's full verdicts are the reference, a mutant needs
one killing test. A latency regression is killed by `harness compare`'s step times. The
runtime reads the mutant when its runner starts, so no build happens per mutant, and fork
servers start once per pass.

Prints the table (mutant, class, verdict, killed by, masked by) and the score, writes
`mutate.json` and `mutate.html` to `--out` (default `reports/mutate`). Exit 0 when the score is
at least `--floor` (default 0) and no mutant is masked, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import html
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.runtime.mutants import Mutant, load_mutants
from harness.runtime.variants import VARIANTS
from harness.storage import unusable_out_dir

DEFAULT_SUITES = ["tests/hil"]
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
PASS_TIMEOUT_S = 3600
RUNNER_TIMEOUT_S = 120  # a hanging mutant is a killed one after this, not a stalled pass
REPO_ROOT = Path(__file__).resolve().parents[2]
FAILED = ("failed", "error")
RACES = ("tests/hil/test_concurrent_execute.py::", "tests/hil/test_concurrency.py::")
"""Tests of races: which ending a run meets (a crash, a freed handle, an error at another step)
moves from run to run with nothing injected, so an XFAIL there that failed in other places
than unmutated is the race's luck, not a defect excused (their passes and new failures still
count)."""


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


def run_pass(out: Path, variant: str, args: list[str], env: dict[str, str],
             stop_at_first: bool) -> tuple[dict, int, float]:
    """One pytest run with a report in `out`: (results.json, exit status, seconds)."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider", "--tb=no",
            f"--runtime-variant={variant}", f"--hil-report={out}",
            f"--artifacts-dir={out / 'artifacts'}", f"--runner-timeout={RUNNER_TIMEOUT_S}"]
    if stop_at_first:
        argv.append("-x")
    started = time.monotonic()
    with open(out / "pytest.log", "w") as log:
        proc = subprocess.run(argv, cwd=REPO_ROOT, env={**os.environ, **env}, stdout=log,
                              stderr=subprocess.STDOUT, timeout=PASS_TIMEOUT_S)
    seconds = time.monotonic() - started
    results = out / "results.json"
    if not results.is_file():
        tail = (out / "pytest.log").read_text(errors="replace")[-2000:]
        raise HarnessError(f"the pass in {out} wrote no results.json (exit {proc.returncode}):"
                           f"\n{tail}")
    return json.loads(results.read_text()), proc.returncode, seconds


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
    in a last stage of their own, without -x."""
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
    """A mutant's verdict from its pass against the unmutated run (the module docstring), and
    a step time beyond TIME_THRESHOLD (`harness compare`) as a kill of a latency regression."""
    from harness.results.compare import compare

    before = {t["nodeid"]: t for t in baseline["tests"]}
    outcome = Outcome(mutant, tests_run=len(mutated["tests"]))
    slower = [c for c in compare(baseline, mutated, TIME_THRESHOLD, TIME_MIN_MS,
                                 float("inf")).metrics if c.metric == "time"]
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


def write_html(path: Path, doc: dict) -> None:
    rows = "".join(
        f"<tr class='{html.escape(m['verdict'])}'><td>{html.escape(m['name'])}</td>"
        f"<td>{html.escape(m['class'])}</td><td>{html.escape(m['verdict'])}</td>"
        f"<td>{'<br>'.join(html.escape(k) for k in (m['masked_by'] or m['killed_by']))}</td>"
        f"<td>{html.escape(m['description'])}</td></tr>" for m in doc["mutants"])
    path.write_text(
        "<!doctype html><meta charset='utf-8'><title>harness mutate</title><style>"
        "td{border-bottom:1px solid #ccc;padding:2px 6px;vertical-align:top}"
        ".killed td:nth-child(3){color:green}.masked td:nth-child(3),.survived td:nth-child(3)"
        "{color:#b00}</style>"
        f"<h1>Mutation score {doc['score']:.0%} on {html.escape(doc['variant'])}</h1>"
        f"<p>{doc['killed']} killed, {doc['masked']} masked, {doc['survived']} survived of "
        f"{len(doc['mutants'])} mutants in {doc['seconds']:.0f} s; suites: "
        f"{html.escape(' '.join(doc['args']))}</p><table><tr><th>mutant</th><th>class</th>"
        f"<th>verdict</th><th>killed by / masked by</th><th>defect</th></tr>{rows}</table>\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness mutate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="stock", choices=[v for v in VARIANTS if v != "none"])
    parser.add_argument("--mutant", action="append", default=[], metavar="NAME")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="run N mutants of the catalogue, chosen by --rotate")
    parser.add_argument("--rotate", default="", metavar="KEY",
                        help="what chooses the sample (CI: the commit); default: the date")
    parser.add_argument("--floor", type=float, default=0.0,
                        help="exit 1 when the score is below this fraction")
    parser.add_argument("--out", type=Path, default=Path("reports/mutate"))
    parser.add_argument("--list", action="store_true", help="print the catalogue and exit")
    args, pytest_args = parser.parse_known_args(argv)
    # --list writes nothing; a later run writes over the files of an earlier one.
    unusable = "" if args.list else unusable_out_dir(args.out, empty=False)
    if unusable:
        print(f"mutate: {unusable}", file=sys.stderr)
        return 2
    try:
        mutants = load_mutants()
    except HarnessError as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 2
    if args.list:
        for m in mutants:
            print(f"{m.name:<36} {m.boundary:<8} {m.kind}: {m.description}")
        return 0
    if args.mutant:
        known = {m.name: m for m in mutants}
        unknown = [n for n in args.mutant if n not in known]
        if unknown:
            print(f"mutate: no mutant {', '.join(unknown)} (see --list)", file=sys.stderr)
            return 2
        mutants = [known[n] for n in args.mutant]
    mutants = sample(mutants, args.sample, args.rotate or time.strftime("%Y-%m-%d"))
    suites = pytest_args or DEFAULT_SUITES
    started = time.monotonic()
    try:
        baseline, status, seconds = run_pass(args.out / "unmutated", args.variant, suites, {},
                                             stop_at_first=False)
        print(f"unmutated ({args.variant}): {len(baseline['tests'])} tests, exit {status}, "
              f"{seconds:.0f} s", flush=True)
        outcomes = []
        for m in mutants:
            if m.equivalent_on(args.variant):
                outcomes.append(Outcome(m, verdict="equivalent"))
                print(f"{m.name}: equivalent on {args.variant}, not run: "
                      f"{m.equivalent_on(args.variant)}", flush=True)
                continue
            tests, turned = reachable(baseline, m), fixed(baseline, m)
            if not tests and not turned:
                outcomes.append(Outcome(m, verdict="not reached"))
                continue
            spent, ran = 0.0, 0
            plan = [(stage, True) for stage in stages(tests)]
            if turned:
                plan.append((turned, False))
            for k, (stage, stop_at_first) in enumerate(plan):
                doc, status, seconds = run_pass(args.out / m.name / f"stage{k + 1}",
                                                args.variant, stage, m.environment(),
                                                stop_at_first=stop_at_first)
                outcome = judge(m, baseline, doc)
                spent, ran = spent + seconds, ran + outcome.tests_run
                if outcome.verdict != "survived":
                    break
            outcome.seconds, outcome.exit_status, outcome.tests_run = spent, status, ran
            outcomes.append(outcome)
            print(f"{m.name}: {outcome.verdict} ({outcome.tests_run} tests, {spent:.0f} s)",
                  flush=True)
    except (HarnessError, subprocess.TimeoutExpired) as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 1
    total = time.monotonic() - started
    doc = {"variant": args.variant, "args": suites, "seconds": round(total, 1),
           "score": score(outcomes),
           **{k: sum(o.verdict == k for o in outcomes) for k in ("killed", "masked", "survived")},
           "not_reached": sum(o.verdict == "not reached" for o in outcomes),
           "equivalent": sum(o.verdict == "equivalent" for o in outcomes),
           "mutants": [o.entry() for o in outcomes]}
    (args.out / "mutate.json").write_text(json.dumps(doc, indent=2) + "\n")
    write_html(args.out / "mutate.html", doc)
    print(table(outcomes))
    print(f"score {doc['score']:.0%}: {doc['killed']} killed, {doc['masked']} masked, "
          f"{doc['survived']} survived, {doc['not_reached']} not reached, "
          f"{doc['equivalent']} equivalent, of {len(outcomes)} "
          f"mutants on {args.variant} in {total:.0f} s; {args.out / 'mutate.json'}")
    return 0 if doc["score"] >= args.floor and not doc["masked"] else 1
