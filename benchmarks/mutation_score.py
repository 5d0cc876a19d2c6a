"""The mutation score and what it costs, on each runtime variant, side by side in one run.

`python -m harness mutate` runs the suites once unmutated and once per mutant of the
catalogue (harness/runtime/mutants.yaml). This script runs it on each variant given (default:
stock and fix-model, the two a change is judged on) over the same suites, one after the other
in one run, and prints per variant the score (killed of scored mutants), the counts of each
verdict, the wall time of the whole run and of the unmutated pass, and the slowest mutants.

    python benchmarks/mutation_score.py [--variant NAME ...] [--out DIR] [pytest args]

Default suites: the simulator HIL suites (`tests/hil`), as `harness mutate` has them. The
target is the issue's: at least 95 % of at least 25 mutants killed, none masked, in at most
10 minutes per variant on the reference 2-core host; the figures move with the machine's load,
so read them side by side within one run.
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    args, suites = parser.parse_known_args(argv)
    variants = args.variant or ["stock", "fix-model"]
    out = args.out or Path(tempfile.mkdtemp(prefix="mutation-score-"))
    rows = []
    for variant in variants:
        doc, seconds, status = run(variant, out / variant, suites)
        unmutated = json.loads((out / variant / "unmutated" / "results.json").read_text())
        slowest = sorted(doc["mutants"], key=lambda m: -m["seconds"])[:3]
        rows.append((variant, doc, seconds, status, unmutated.get("duration_s", 0.0), slowest))
    print(f"{'variant':22} {'score':>6} {'killed':>6} {'masked':>6} {'survived':>8} "
          f"{'equiv.':>6} {'mutants':>7} {'wall s':>7} {'unmutated s':>11}  exit")
    for variant, doc, seconds, status, base, _ in rows:
        print(f"{variant:22} {doc['score']:6.0%} {doc['killed']:6d} {doc['masked']:6d} "
              f"{doc['survived']:8d} {doc.get('equivalent', 0):6d} {len(doc['mutants']):7d} "
              f"{seconds:7.0f} {base:11.0f}  {status}")
    for variant, doc, *_, slowest in rows:
        left = [m["name"] for m in doc["mutants"] if m["verdict"] in ("survived", "masked")]
        print(f"{variant}: slowest mutants " + ", ".join(
            f"{m['name']} {m['seconds']:.0f} s" for m in slowest) +
            (f"; not killed: {', '.join(left)}" if left else "; every scored mutant killed"))
    print(f"reports: {out}/<variant>/mutate.html")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
