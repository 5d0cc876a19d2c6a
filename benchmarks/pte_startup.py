"""Start-up of a `--pte` session: reading its programs, cold (empty program cache) and warm.

A pytest session given programs through `--pte` reads each one at start-up (what it was
compiled for: methods, SoC, inputs) before any test runs, through
`harness.programs.pte_reader.read_programs`, whose child process imports executorch. This
script times exactly that call in a fresh Python process, as the pytest controller makes it,
with `EXECUTORCH_HIL_CACHE` pointing at a new empty directory (cold: every program read) and
then at the same directory again (warm: every answer cached), and counts the processes each
started. Both are printed side by side, in total and per program.

    python benchmarks/pte_startup.py [PROGRAM.pte | DIR ...] [--root CHECKOUT ...] [--rounds N]

Programs: the given files and every `*.pte` in the given directories; by default the corpus CI
builds (scripts/corpus/run.py: the newest `corpus/*/` of the harness cache holding a
manifest.json), else every `models/*/model.pte` of the harness cache.

`--root` times another checkout of the harness (repeatable; default: this one), e.g. the
release before a change: where that checkout has no `read_programs`, its start-up read each
program with `harness.programs.pte.read_program` in turn, and that is what is timed. Rounds
are interleaved over the checkouts, so the load of a shared machine hits them alike; read the
figures side by side within one run, not as absolute targets.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 3600.0

# Run in the timed process with the checkout on sys.path: reads the programs as its start-up
# does, counting the processes it starts, and prints one JSON line.
TIMED = r"""
import json, subprocess, sys, time
from pathlib import Path

started = []
class Counted(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        started.append(args[0] if args else kwargs.get("args"))
        super().__init__(*args, **kwargs)
subprocess.Popen = Counted

paths = [Path(p) for p in json.loads(sys.argv[1])]
begin = time.monotonic()
try:
    from harness.programs.pte_reader import read_programs
    mode = "one child per batch"
    answers = read_programs(paths)
    errors = [str(a) for a in answers if not hasattr(a, "sha256")]
except ImportError:  # a harness before the batched reader: its start-up read one by one
    from harness.errors import ModelError
    from harness.programs.pte import read_program
    mode = "one child per program"
    errors = []
    for path in paths:
        try:
            read_program(path)
        except ModelError as exc:
            errors.append(str(exc))
seconds = time.monotonic() - begin
print(json.dumps({"seconds": seconds, "processes": len(started), "mode": mode,
                  "errors": errors}))
"""


def corpus(args: list[str]) -> tuple[list[Path], str]:
    """The programs to read and where they come from."""
    if args:
        paths: list[Path] = []
        for arg in map(Path, args):
            paths += sorted(arg.glob("*.pte")) if arg.is_dir() else [arg]
        return [p.resolve() for p in paths], ", ".join(args)
    root = Path(os.environ.get("EXECUTORCH_HIL_CACHE") or Path.home() / ".cache" / "executorch-hil")
    built = sorted((d for d in (root / "corpus").glob("*") if (d / "manifest.json").is_file()),
                   key=lambda d: d.stat().st_mtime)
    if built:
        return sorted(built[-1].glob("*.pte")), f"the CI corpus {built[-1]}"
    return sorted(root.glob("models/*/model.pte")), f"the compiled models of {root}"


def timed(root: Path, paths: list[Path], cache: Path) -> dict:
    """One read of `paths` by the harness of checkout `root`, with the program cache `cache`."""
    env = {**os.environ, "EXECUTORCH_HIL_CACHE": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    begin = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", TIMED, json.dumps([str(p) for p in paths])],
                          cwd=root, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - begin
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"seconds"')]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{root}: the timed read failed (exit {proc.returncode}):\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    return {**json.loads(lines[-1]), "wall": wall}


def _cache_dir() -> Path:
    """A program cache of its own, holding nothing but what the read writes."""
    return Path(tempfile.mkdtemp(prefix="pte-startup-"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help="program files or directories of them")
    parser.add_argument("--root", action="append", type=Path, default=[],
                        help="a checkout of the harness to time (repeatable; default: this one)")
    parser.add_argument("--rounds", type=int, default=1, help="cold+warm rounds per checkout")
    args = parser.parse_args(argv)
    roots = [r.resolve() for r in args.root] or [REPO_ROOT]
    paths, where = corpus(args.programs)
    if not paths:
        print(f"no programs in {where}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in paths)
    print(f"programs: {len(paths)} ({size / 1e6:.1f} MB) from {where}")
    print(f"host: {os.cpu_count()} cores, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"Python {platform.python_version()}")
    results: dict[Path, dict[str, list[dict]]] = {r: {"cold": [], "warm": []} for r in roots}
    for round_index in range(args.rounds):
        for root in roots[round_index % len(roots):] + roots[:round_index % len(roots)]:
            cache = _cache_dir()
            try:
                results[root]["cold"].append(timed(root, paths, cache))
                results[root]["warm"].append(timed(root, paths, cache))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    n = len(paths)
    print(f"\n{'checkout':<28} {'reader':<22} {'run':>4} {'start-up s':>10} {'per program s':>14} "
          f"{'processes':>9} {'errors':>6}")
    for root in roots:
        for phase in ("cold", "warm"):
            runs = results[root][phase]
            seconds = statistics.median(r["seconds"] for r in runs)
            spread = (f" ({min(r['seconds'] for r in runs):.1f}-"
                      f"{max(r['seconds'] for r in runs):.1f})" if len(runs) > 1 else "")
            print(f"{str(root)[-28:]:<28} {runs[0]['mode']:<22} {phase:>4} "
                  f"{seconds:>10.2f} {seconds / n:>14.3f} {runs[0]['processes']:>9} "
                  f"{len(runs[0]['errors']):>6}{spread}")
    for root in roots:
        errors = results[root]["cold"][0]["errors"]
        if errors:
            print(f"\n{root}: {len(errors)} program(s) not read:\n  " + "\n  ".join(
                e.splitlines()[0] for e in errors))
    print(f"\nload after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
