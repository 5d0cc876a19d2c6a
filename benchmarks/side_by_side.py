"""Two ways of doing one CI step, timed back to back: the old command and the new, in turns.

    python benchmarks/side_by_side.py [--repeats N] --pair LABEL OLD NEW [--pair ...]

A machine others share cannot be measured idle, so the two commands of a pair run one after
the other, the one that goes first alternating per round, and the ratio that matters is per
round (neighbours in time see about the same load). Each command runs under `bash -c` from
the current directory with the current environment; a command that exits non-zero is a
failed measurement (exit 1), since a faster step that no longer passes proves nothing.

Prints the load average before and after, per pair and round the seconds of each side, and
per pair the median old, median new, and the median per-round ratio new/old.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(command: str) -> tuple[float, int]:
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", command], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        print(f"  exit {proc.returncode}: {command}\n{proc.stderr[-2000:]}", file=sys.stderr)
    return time.monotonic() - started, proc.returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pair", nargs=3, action="append", required=True,
                        metavar=("LABEL", "OLD", "NEW"))
    args = parser.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    failed = False
    rows = []
    for label, old, new in args.pair:
        times: dict[str, list[float]] = {"old": [], "new": []}
        for round_ in range(args.repeats):
            order = [("old", old), ("new", new)]
            if round_ % 2:
                order.reverse()
            for side, command in order:
                seconds, status = timed(command)
                failed |= status != 0
                times[side].append(seconds)
                print(f"{label} round {round_ + 1} {side}: {seconds:.1f} s"
                      f"{'' if status == 0 else f' (exit {status})'}", flush=True)
        ratio = statistics.median(n / o for o, n in zip(times["old"], times["new"]))
        rows.append((label, statistics.median(times["old"]), statistics.median(times["new"]),
                     ratio))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'step':40s} {'old s':>8s} {'new s':>8s} {'new/old':>8s}")
    for label, old_s, new_s, ratio in rows:
        print(f"{label:40s} {old_s:8.1f} {new_s:8.1f} {ratio:8.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
