"""The mutation score and what it costs, on each runtime variant, side by side in one run.

`python -m harness mutate` runs the suites once unmutated and once per mutant of the
catalogue (harness/runtime/mutants.yaml). This script runs it on each variant given (default:
stock and fix-model, the two a change is judged on) over the same suites, one after the other
in one run, and prints per variant the score (killed of scored mutants), the counts of each
verdict, the wall time of the whole run and of the unmutated pass, and the slowest mutants.

    python benchmarks/mutation_score.py [--variant NAME ...] [--out DIR] [pytest args]
    python benchmarks/mutation_score.py --reuse DIR [--variant NAME ...] --markdown FILE

`--reuse DIR` reads runs made before (`DIR/<variant>/mutate.json`, as `harness mutate --out
DIR/<variant>` writes) instead of running; `--markdown FILE` writes per variant the table of
every mutant (killed by, masked by, survived) with the score, the time and the load average,
as docs/mutation-scores.md is made.

Default suites: the simulator HIL suites (`tests/hil`), as `harness mutate` has them. The
target is the issue's: at least 95 % of at least 25 mutants killed, none masked, in at most
10 minutes per variant on the reference 2-core host; the figures move with the machine's load,
so read them side by side within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run(variant: str, out: Path, suites: list[str]) -> tuple[dict, float, int]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "mutate", "--variant", variant,
                           "--out", str(out), *suites], cwd=REPO_ROOT, text=True,
                          capture_output=True)
    seconds = time.monotonic() - started
    doc_path = out / "mutate.json"
    if not doc_path.is_file():
        sys.exit(f"harness mutate on {variant} wrote no mutate.json (exit {proc.returncode}):\n"
                 f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return json.loads(doc_path.read_text()), seconds, proc.returncode


def load_of(doc: dict) -> str:
    """The load average at the start and end of a run (1 min), as mutate.json keeps it."""
    load = doc.get("load_average") or {}
    return " to ".join(f"{v[0]:.1f}" for v in (load.get("start"), load.get("end")) if v) or "-"


def markdown(variant: str, doc: dict) -> str:
    """One variant's measured table: every mutant, what killed it, what masked it, whether it
    survived, then the score, the time and the load."""
    lines = [f"### `{variant}`", "",
             f"Score {doc['score']:.0%}: {doc['killed']} killed, {doc['masked']} masked, "
             f"{doc['survived']} survived, {doc.get('equivalent', 0)} equivalent, of "
             f"{len(doc['mutants'])} mutants; {doc['seconds']:.0f} s, of which the unmutated pass "
             f"{doc.get('baseline_seconds') or 0:.0f} s; load average (1 min) {load_of(doc)} on "
             "2 cores.", "",
             "| mutant | verdict | killed by | masked by | survived | tests run | s |",
             "| --- | --- | --- | --- | --- | ---: | ---: |"]
    for m in doc["mutants"]:
        def cell(who: list[str]) -> str:
            return ("; ".join(f"`{w.split('/')[-1]}`" for w in who[:2])
                    + (f" (+{len(who) - 2})" if len(who) > 2 else "")) or "-"
        lines.append(f"| `{m['name']}` | {m['verdict']} | {cell(m['killed_by'])} | "
                     f"{cell(m['masked_by'])} | {'yes' if m['verdict'] == 'survived' else '-'} | "
                     f"{m['tests_run']} | {m['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reuse", type=Path, default=None, metavar="DIR",
                        help="read DIR/<variant>/mutate.json instead of running")
    parser.add_argument("--markdown", type=Path, default=None, metavar="FILE")
    args, suites = parser.parse_known_args(argv)
    variants = args.variant or ["stock", "fix-model"]
    out = args.reuse or args.out or Path(tempfile.mkdtemp(prefix="mutation-score-"))
    rows = []
    for variant in variants:
        if args.reuse:
            path = out / variant / "mutate.json"
            if not path.is_file():
                sys.exit(f"--reuse {out}: no {path} (harness mutate --out {out / variant})")
            doc = json.loads(path.read_text())
            seconds, status = doc["seconds"], 1 if doc["masked"] else 0
        else:
            load_start = os.getloadavg()
            doc, seconds, status = run(variant, out / variant, suites)
            doc.setdefault("load_average", {"start": list(load_start),
                                            "end": list(os.getloadavg())})
        slowest = sorted(doc["mutants"], key=lambda m: -m["seconds"])[:3]
        rows.append((variant, doc, seconds, status, doc.get("baseline_seconds") or 0.0, slowest))
    print(f"{'variant':22} {'score':>6} {'killed':>6} {'masked':>6} {'survived':>8} "
          f"{'equiv.':>6} {'mutants':>7} {'wall s':>7} {'unmutated s':>11} {'load':>12}  exit")
    for variant, doc, seconds, status, base, _ in rows:
        print(f"{variant:22} {doc['score']:6.0%} {doc['killed']:6d} {doc['masked']:6d} "
              f"{doc['survived']:8d} {doc.get('equivalent', 0):6d} {len(doc['mutants']):7d} "
              f"{seconds:7.0f} {base:11.0f} {load_of(doc):>12}  {status}")
    for variant, doc, *_, slowest in rows:
        left = [m["name"] for m in doc["mutants"] if m["verdict"] in ("survived", "masked")]
        print(f"{variant}: slowest mutants " + ", ".join(
            f"{m['name']} {m['seconds']:.0f} s" for m in slowest) +
            (f"; not killed: {', '.join(left)}" if left else "; every scored mutant killed"))
    print(f"reports: {out}/<variant>/mutate.html")
    if args.markdown:
        args.markdown.write_text("\n".join(markdown(variant, doc) for variant, doc, *_ in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
