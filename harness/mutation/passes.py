"""The pytest passes of a mutation run: one per stage of each mutant, each a pytest process
with the mutant in its environment and its own `--hil-report`, judged against an unmutated run.

The runtime reads the mutant when a runner starts (the wrapper's and the interposer's
environment variables), so no build happens per mutant, and fork servers start once per pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.errors import HarnessError
from harness.mutation.verdicts import STAGES, Outcome, fixed, judge, reachable, stages
from harness.runtime.mutants import Mutant

PASS_TIMEOUT_S = 3600
RUNNER_TIMEOUT_S = 120  # a hanging mutant is a killed one after this, not a stalled pass
TIMEOUT_FACTOR = 10
MIN_RUNNER_TIMEOUT_S = 30.0
"""A mutant pass's runner timeout (`pass_runner_timeout`): TIMEOUT_FACTOR times the longest
unmutated test of the pass, at least MIN_RUNNER_TIMEOUT_S and at most RUNNER_TIMEOUT_S. A hanging
mutant is killed at that timeout, and a runner whose whole test took 0.3 s unmutated need not be
waited on for two minutes to be called hung: the hanging mutant took 122 s of each mutation run,
a fifth of it. Mutation tools bound a mutant's run the same way, from the unmutated run (Stryker's
timeoutFactor and timeoutMS). The floor stays above the nemesis holds' default timeout (10 s),
which must be under the runner's (`check_hold_timeouts`); the factor leaves a slower machine
minutes later ten times the unmutated test's time before a correct run would be called hung."""
SERIAL_BELOW_S = 20.0
"""A stage whose tests took less than this in the unmutated run runs in one process (`-n 0`):
pytest-xdist's workers each import the harness and start fork servers of their own, which costs
more than two workers save on a few short tests (most mutants die in the isolation suite, 12
tests of about 0.3 s each)."""
REPO_ROOT = Path(__file__).resolve().parents[2]


def run_pass(out: Path, variant: str, args: list[str], env: dict[str, str],
             stop_at_first: bool, options: tuple[str, ...] = (),
             serial: bool = False,
             runner_timeout: float = RUNNER_TIMEOUT_S) -> tuple[dict, int, float]:
    """One pytest run of `args` (test ids or paths) with a report in `out`: (results.json,
    exit status, seconds). `options` are the caller's own pytest options (a device, a runner),
    passed on unchanged and after `serial`'s `-n 0`, so a caller's own `-n` still wins."""
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pytest", *(("-n", "0") if serial else ()), *options, *args,
            "-q", "-p", "no:cacheprovider", "--tb=no", f"--runtime-variant={variant}", f"--hil-report={out}",
            f"--artifacts-dir={out / 'artifacts'}", f"--runner-timeout={runner_timeout:g}"]
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


def unmutated_seconds(baseline: dict) -> dict[str, float]:
    """Each test's duration in the unmutated run `baseline` (0 where it has none)."""
    return {t["nodeid"]: t.get("duration_s") or 0.0 for t in baseline["tests"]}


def plan(mutant: Mutant, baseline: dict) -> list[tuple[list[str], bool, bool]]:
    """A mutant's passes against the unmutated run `baseline`, in order: (tests, stop at the
    first kill, in one process). The tests that can reach it in the named stages
    (verdicts.STAGES), each with `-x`; then, without `-x`, the tests a fix model turned
    XPASS(strict) (they fail by design, and a mutant that brings their bug back changes them);
    last every other test, with `-x`. The fixed cells come before the rest since the mutants
    only they kill (a user count off, a destroy made twice) otherwise ran the whole rest first:
    about 170 tests and 100 to 140 s under load, against 26 to 47 s for the fixed cells. A
    stage whose tests took less than SERIAL_BELOW_S unmutated runs without pytest-xdist."""
    tests, turned = reachable(baseline, mutant), fixed(baseline, mutant)
    took = unmutated_seconds(baseline)
    named = {f + "::" for files in STAGES for f in files if f}
    staged = [(stage, not stage[0].startswith(tuple(named))) for stage in stages(tests)]
    passes = ([(stage, True) for stage, rest in staged if not rest]
              + ([(turned, False)] if turned else [])
              + [(stage, True) for stage, rest in staged if rest])
    return [(stage, stop, sum(took.get(t, 0.0) for t in stage) < SERIAL_BELOW_S)
            for stage, stop in passes]


def pass_runner_timeout(tests: list[str], baseline: dict) -> float:
    """The runner timeout of a mutant's pass over `tests`: TIMEOUT_FACTOR times the longest of
    them in the unmutated run `baseline`, within [MIN_RUNNER_TIMEOUT_S, RUNNER_TIMEOUT_S]."""
    took = unmutated_seconds(baseline)
    longest = max((took.get(t, 0.0) for t in tests), default=0.0)
    return min(RUNNER_TIMEOUT_S, max(MIN_RUNNER_TIMEOUT_S, TIMEOUT_FACTOR * longest))


def run_mutant(mutant: Mutant, baseline: dict, variant: str, out: Path,
               options: tuple[str, ...] = ()) -> Outcome:
    """One mutant against the unmutated run `baseline`: its passes (`plan`), the next only
    while it survives."""
    if mutant.equivalent_on(variant):
        return Outcome(mutant, verdict="equivalent")
    passes = plan(mutant, baseline)
    if not passes:
        return Outcome(mutant, verdict="not reached")
    spent, ran, status = 0.0, 0, None
    outcome = Outcome(mutant)
    for k, (stage, stop_at_first, serial) in enumerate(passes):
        doc, status, seconds = run_pass(out / mutant.name / f"stage{k + 1}", variant, stage,
                                        mutant.environment(), stop_at_first, options, serial,
                                        pass_runner_timeout(stage, baseline))
        outcome = judge(mutant, baseline, doc)
        spent, ran = spent + seconds, ran + outcome.tests_run
        if outcome.verdict != "survived":
            break
    outcome.seconds, outcome.exit_status, outcome.tests_run = spent, status, ran
    return outcome


def run_mutants(mutants: list[Mutant], baseline: dict, variant: str, out: Path,
                options: tuple[str, ...] = (),
                progress: Callable[[str], None] = lambda line: None) -> list[Outcome]:
    """Every mutant of `mutants` against `baseline`, in order, each line of progress told."""
    outcomes = []
    for mutant in mutants:
        outcome = run_mutant(mutant, baseline, variant, out, options)
        outcomes.append(outcome)
        if outcome.verdict == "equivalent":
            progress(f"{mutant.name}: equivalent on {variant}, not run: "
                     f"{mutant.equivalent_on(variant)}")
        else:
            progress(f"{mutant.name}: {outcome.verdict} ({outcome.tests_run} tests, "
                     f"{outcome.seconds:.0f} s)")
    return outcomes
