"""What a pytest session and a `python -m harness` command cost in CPU before their real work,
in two checkouts side by side.

    python benchmarks/session_startup.py OLD_TREE NEW_TREE [--repeats N] [--only LABEL ...]

A cold `python -m pytest` starts about 340 pytest sessions (pytester's runpytest_subprocess in
tests/framework, plus their xdist workers) and about 100 `python -m harness` children, so what
each one spends on start-up is paid hundreds of times. Each command below runs in each tree
(cwd and PYTHONPATH the tree, PYTHONDONTWRITEBYTECODE unset as in CI, the harness cache shared),
old and new in turns with the first side alternating per round, and its CPU is the user + sys
time of the child and everything it started (getrusage(RUSAGE_CHILDREN) before and after):
CPU, not wall time, because the machine is shared and the suite is CPU-bound.

Prints each round's seconds, then per command the median old and new CPU and the median of the
per-round ratios new/old. A command that exits non-zero (other than pytest's 0) in either tree
is a failed measurement: exit 1.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

from side_by_side import alternating, load_average, print_table

PTE_GLOB = "models/linear_relu-SM8650-fp16-*/model.pte"

COMMANDS: dict[str, list[str]] = {
    "collect-only": ["-m", "pytest", "tests/hil/test_isolation.py", "--collect-only", "-q",
                     "-p", "no:cacheprovider"],
    "one HIL test": ["-m", "pytest", "tests/hil/test_isolation.py", "-k",
                     "s1 and linear_relu and fp16", "-n", "0", "-q", "-p", "no:cacheprovider"],
    "harness --help": ["-m", "harness", "--help"],
    "harness validate-configs": ["-m", "harness", "validate-configs"],
    "harness inspect": ["-m", "harness", "inspect", "{pte}"],
}


def cpu_seconds(tree: Path, args: list[str]) -> tuple[float, int, str]:
    """(user + sys seconds of the command and its children, exit status, stderr tail)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, *args], cwd=tree, env=env, text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc.returncode, proc.stderr[-1500:]


def a_program() -> str:
    """A cached compiled program for `inspect` (the suites compile it on first use)."""
    root = Path(os.environ.get("EXECUTORCH_HIL_CACHE")
                or Path.home() / ".cache" / "executorch-hil")
    found = sorted(root.glob(PTE_GLOB))
    if not found:
        raise SystemExit(f"no {PTE_GLOB} under {root}: run tests/hil/test_isolation.py once")
    return str(found[0])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", action="append", choices=sorted(COMMANDS), default=[])
    args = parser.parse_args(argv)
    pte = a_program()
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    print(f"load average before: {load_average()}", flush=True)
    failed = False
    rows = []
    for label, template in COMMANDS.items():
        if args.only and label not in args.only:
            continue
        command = [pte if part == "{pte}" else part for part in template]
        for tree in trees.values():  # one uncounted run each: bytecode written, caches warm
            cpu_seconds(tree, command)

        def measure(side: str, label: str = label, command: list[str] = command
                    ) -> tuple[float, int]:
            seconds, status, err = cpu_seconds(trees[side], command)
            if status != 0:
                print(f"  {label} {side}: exit {status}\n{err}", file=sys.stderr)
            return seconds, status

        old_s, new_s, ratio, bad = alternating(label, measure, args.repeats, unit="s CPU",
                                               digits=3)
        failed |= bad
        rows.append((label, old_s, new_s, ratio))
    print_table(rows, "command", "CPU s", width=28, column=10, digits=3)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
