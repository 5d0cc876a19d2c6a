"""Race suites' verdicts, idle and under load: does a verdict depend on the machine?

Runs the race suites (tests/hil/test_concurrency.py and test_concurrent_execute.py: the forced
endings, whose interleaving the QNN nemesis fixes, and the release-together stress tests around
them) `--runs` times on an otherwise idle session and `--runs` times with `--stress-load N` CPU
hogs beside it, alternating, one pytest process each (`-n 0`, the simulator), and prints each
test's verdicts in both conditions. A test whose verdicts differ between runs or between the
conditions depends on chance.

    python benchmarks/race_verdicts.py --runs 5 --load 2 [-- extra pytest args]

Environment passed on: HARNESS_S5_REPEATS (default here 50) and
HARNESS_CONCURRENT_EXECUTE_ROUNDS, to bound the stress tests' launches.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITES = ["tests/hil/test_concurrency.py", "tests/hil/test_concurrent_execute.py"]
OUTCOME = re.compile(r"^(PASSED|FAILED|XFAIL|XPASS|ERROR|SKIPPED) (\S+)")


def run_once(load: int, extra: list[str]) -> tuple[dict[str, str], float]:
    """One pytest session over the race suites; each test's outcome and the wall time."""
    cmd = [sys.executable, "-m", "pytest", "-n", "0", "-q", "-rA", "-p", "no:cacheprovider",
           *SUITES, *extra]
    if load:
        cmd += ["--stress-load", str(load)]
    env = {**os.environ, "HARNESS_S5_REPEATS": os.environ.get("HARNESS_S5_REPEATS", "50")}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    outcomes = {}
    for line in proc.stdout.splitlines():
        m = OUTCOME.match(line)
        if m:
            outcomes[m.group(2).split("::", 1)[-1]] = m.group(1)
    if not outcomes:
        raise SystemExit(f"no test outcomes from {' '.join(cmd)}:\n{proc.stdout[-3000:]}"
                         f"\n{proc.stderr[-2000:]}")
    return outcomes, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per condition (default 5)")
    ap.add_argument("--load", type=int, default=2, help="CPU hogs in the loaded runs (default 2)")
    ap.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args()
    if args.runs < 1 or args.load < 1:
        ap.error("--runs and --load must be at least 1")
    seen: dict[str, dict[str, list[str]]] = collections.defaultdict(
        lambda: {"idle": [], "load": []})
    walls: dict[str, list[float]] = {"idle": [], "load": []}
    for i in range(args.runs):
        for cond, load in (("idle", 0), ("load", args.load)) if i % 2 == 0 else \
                (("load", args.load), ("idle", 0)):
            outcomes, wall = run_once(load, args.extra)
            walls[cond].append(wall)
            for test, outcome in outcomes.items():
                seen[test][cond].append(outcome)
            print(f"run {i + 1} {cond}: {wall:.0f} s, {len(outcomes)} tests", file=sys.stderr)

    def counts(outcomes: list[str]) -> str:
        return " ".join(f"{k} {v}" for k, v in sorted(collections.Counter(outcomes).items()))

    width = max(len(t) for t in seen)
    print(f"{'test':<{width}}  {'idle (' + str(args.runs) + ' runs)':<22}  "
          f"{'load ' + str(args.load) + ' hogs (' + str(args.runs) + ' runs)':<26}  same")
    for test in sorted(seen):
        idle, load = seen[test]["idle"], seen[test]["load"]
        same = "yes" if len(set(idle) | set(load)) == 1 else "NO"
        print(f"{test:<{width}}  {counts(idle):<22}  {counts(load):<26}  {same}")
    for cond, w in walls.items():
        print(f"wall {cond}: mean {sum(w) / len(w):.0f} s over {len(w)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
