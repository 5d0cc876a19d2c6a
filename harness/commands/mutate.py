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
while the mutant survives, the tests a fix model turned XPASS(strict) (without `-x`: they fail
by design) before the last stage, every other test: the unmutated run's full verdicts are the reference, a mutant needs
one killing test. A latency regression is killed by `harness compare`'s step times. The
runtime reads the mutant when its runner starts, so no build happens per mutant, and fork
servers start once per pass.

Prints the table (mutant, class, verdict, killed by, masked by) and the score, writes
`mutate.json` and `mutate.html` to `--out` (default `reports/mutate`). The pytest option
`--mutate` does the same within a session, which is then the unmutated run (harness.mutation). Exit 0 when the score is
at least `--floor` (default 0) and no mutant is masked, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.errors import HarnessError
from harness.mutation.passes import run_mutants, run_pass
from harness.mutation.verdicts import document, passes, select, score_line, table
from harness.report.html import mutation_section
from harness.runtime.mutants import load_mutants
from harness.runtime.variants import VARIANTS
from harness.storage import unusable_out_dir

DEFAULT_SUITES = ["tests/hil"]


def write_html(path: Path, doc: dict) -> None:
    """mutate.html: the section the `--hil-report` page shows for `--mutate`."""
    path.write_text("<!doctype html><meta charset='utf-8'><title>harness mutate</title>"
                    + mutation_section(doc) + "\n")


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
    try:
        mutants = select(mutants, args.mutant, args.sample,
                         args.rotate or time.strftime("%Y-%m-%d"))
    except HarnessError as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 2
    suites = pytest_args or DEFAULT_SUITES
    started, load_start = time.monotonic(), os.getloadavg()
    try:
        baseline, status, seconds = run_pass(args.out / "unmutated", args.variant, suites, {},
                                             stop_at_first=False)
        print(f"unmutated ({args.variant}): {len(baseline['tests'])} tests, exit {status}, "
              f"{seconds:.0f} s", flush=True)
        outcomes = run_mutants(mutants, baseline, args.variant, args.out,
                               progress=lambda line: print(line, flush=True))
    except (HarnessError, subprocess.TimeoutExpired) as exc:
        print(f"mutate: {exc}", file=sys.stderr)
        return 1
    doc = document(outcomes, args.variant, suites, time.monotonic() - started, seconds,
                   load_start)
    (args.out / "mutate.json").write_text(json.dumps(doc, indent=2) + "\n")
    write_html(args.out / "mutate.html", doc)
    print(table(outcomes))
    print(f"{score_line(doc)}; {args.out / 'mutate.json'}")
    return 0 if passes(doc, args.floor) else 1
