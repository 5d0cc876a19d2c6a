"""What the reports add to a run, side by side in one run: `pytest tests/hil` on the simulator
with and without `--hil-report DIR --junitxml DIR/junit.xml`, alternating per round, wall time
of the whole pytest process; and the sizes of what the report run wrote (report.html,
results.json, junit.xml).

    python benchmarks/report_cost.py [--rounds N] [--selection EXPR]

Exit status 0 when every run passed (exit 0 of pytest) and wrote its files, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run(selection: str, report: Path | None, artifacts: Path) -> tuple[float, int]:
    argv = [sys.executable, "-m", "pytest", "tests/hil", "-q", "-p", "no:cacheprovider",
            f"--artifacts-dir={artifacts}"]
    argv += ["-k", selection] if selection else []
    if report is not None:
        argv += [f"--hil-report={report}", f"--junitxml={report / 'junit.xml'}"]
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-2000:])
    return elapsed, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--selection", default="", metavar="EXPR",
                        help="a -k expression over tests/hil (default: all of it)")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; pytest tests/hil"
          + (f" -k {args.selection!r}" if args.selection else ""))
    ok = True
    times: dict[str, list[float]] = {"plain": [], "with reports": []}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="report-cost-") as tmp:
        work = Path(tmp)
        run(args.selection, None, work / "warm-up")  # compile caches, page cache
        for round_ in range(args.rounds):
            order = list(times) if round_ % 2 == 0 else list(reversed(times))
            for name in order:
                report = work / f"report-{round_}" if name == "with reports" else None
                elapsed, code = run(args.selection, report, work / f"artifacts-{round_}-{name}")
                times[name].append(elapsed)
                ok = ok and code == 0
                print(f"  round {round_} {name:13} {elapsed:7.1f} s  exit {code}")
                if report is not None:
                    for file in ("report.html", "results.json", "junit.xml"):
                        path = report / file
                        ok = ok and path.is_file()
                        sizes[file] = path.stat().st_size if path.is_file() else 0
    plain, reported = (statistics.median(times[k]) for k in ("plain", "with reports"))
    print(f"\nmedian: plain {plain:.1f} s, with reports {reported:.1f} s: "
          f"+{reported - plain:.1f} s ({reported / plain:.2f}x)")
    print("written: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
