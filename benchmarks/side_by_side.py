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
from collections.abc import Callable


def timed(command: str) -> tuple[float, int]:
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", command], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        print(f"  exit {proc.returncode}: {command}\n{proc.stderr[-2000:]}", file=sys.stderr)
    return time.monotonic() - started, proc.returncode


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def alternating(label: str, measure: Callable[[str], tuple[float, int]], repeats: int,
                unit: str = "s", digits: int = 1) -> tuple[float, float, float, bool]:
    """`measure("old")` and `measure("new")` (each: seconds, exit status) `repeats` times, the
    side that goes first alternating per round, each round's figure printed; (median old,
    median new, median per-round ratio new/old, whether any run exited non-zero)."""
    samples: dict[str, list[float]] = {"old": [], "new": []}
    failed = False
    for round_ in range(repeats):
        for side in ("old", "new") if round_ % 2 == 0 else ("new", "old"):
            seconds, status = measure(side)
            failed |= status != 0
            samples[side].append(seconds)
            print(f"{label} round {round_ + 1} {side}: {seconds:.{digits}f} {unit}"
                  f"{'' if status == 0 else f' (exit {status})'}", flush=True)
    ratio = statistics.median(n / o for o, n in zip(samples["old"], samples["new"]))
    return statistics.median(samples["old"]), statistics.median(samples["new"]), ratio, failed


def print_table(rows: list[tuple[str, float, float, float]], what: str, unit: str,
                width: int, column: int, digits: int) -> None:
    """The load average after, then per row: median old, median new, ratio new/old."""
    print(f"load average after: {load_average()}")
    print(f"{what:{width}s} {'old ' + unit:>{column}s} {'new ' + unit:>{column}s} "
          f"{'new/old':>8s}")
    for label, old_s, new_s, ratio in rows:
        print(f"{label:{width}s} {old_s:{column}.{digits}f} {new_s:{column}.{digits}f} "
              f"{ratio:8.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pair", nargs=3, action="append", required=True,
                        metavar=("LABEL", "OLD", "NEW"))
    args = parser.parse_args(argv)
    print(f"load average before: {load_average()}", flush=True)
    failed = False
    rows = []
    for label, old, new in args.pair:
        commands = {"old": old, "new": new}
        old_s, new_s, ratio, bad = alternating(
            label, lambda side, commands=commands: timed(commands[side]), args.repeats)
        failed |= bad
        rows.append((label, old_s, new_s, ratio))
    print_table(rows, "step", "s", width=40, column=8, digits=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
