"""Ordering exploration throughput: orderings explored per minute, one at a time and on every
core, and the pruning factor of treating modules of one program as interchangeable.

    python benchmarks/exploration.py [--sample 300] [--program xnn_convs|linear_relu]
    python benchmarks/exploration.py --shrinking [--seeds 5]

Runs a sample of the three-module exhaustive exploration (load / load-method / execute /
unload-method / destroy per module, every ordering up to renaming the modules) on the HTP
simulator with the native runner, side by side with jobs=1 and jobs=<cores>, and prints the
measured rates and what they make of the full exploration's wall time.

`--shrinking` instead compares the two random searches on a real bug, the QNN delegate-cache
bug of executorch 1.5.1 (three modules: two of linear_relu, one of mlp_tanh; load, execute,
destroy): the hand-written sampler (`random_interleavings` + `explore`'s greedy shrink, as
tests/hil/test_orderings.py used it) and Hypothesis (`harness.drive.search.search`, no
database), each with the same seeds. Per search: orderings run until the first failure, runs
in all (search + shrink), the minimal ordering's length, wall time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.programs.compile import compile_model
from harness.devices.simulator import SimulatorDevice
from harness.drive.driver import ScenarioDriver
from harness.programs.models import get_model
from harness.drive.orderings import ModulePlan, explore, interleavings, pruning_factor
from harness.qnn.sdk import discover
from harness.runner.select import choose_runner

PROGRAMS = {"xnn_convs": ("fp32", ("conv_nobias",)), "linear_relu": ("fp16", ("forward",))}


def count(iterator) -> int:
    return sum(1 for _ in iterator)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300, help="orderings per measurement")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="xnn_convs")
    parser.add_argument("--shrinking", action="store_true",
                        help="compare the hand-written sampler and Hypothesis on a real bug")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    if args.shrinking:
        return shrinking(args.seeds)
    precision, methods = PROGRAMS[args.program]
    sdk = discover()
    model = compile_model(get_model(args.program), "SM8650", precision, sdk)
    device = SimulatorDevice(sdk, "SM8650", choose_runner("native"))
    plans = [ModulePlan(m, model, methods, unload=True) for m in "ABC"]

    # Counting the full space is itself a walk; the symmetric one is small enough to count.
    symmetric = count(interleavings(plans, symmetric=True))
    factor = pruning_factor(plans)
    full = symmetric * factor
    print(f"program {args.program}: 3 modules x (load, load-method, execute, unload-method, "
          f"destroy)")
    print(f"orderings: {full} in all, {symmetric} up to renaming (pruning factor {factor})")

    sample = list(itertools.islice(interleavings(plans, symmetric=True), args.sample))
    cores = os.cpu_count() or 1
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for jobs in (1, cores):
            driver = ScenarioDriver(device, Path(tmp) / f"jobs{jobs}", 300.0)
            started = time.perf_counter()
            exploration = explore(driver, f"bench{jobs}", plans, sample, jobs=jobs,
                                  shrink_budget=0)
            elapsed = time.perf_counter() - started
            rates[jobs] = exploration.ran / elapsed * 60
            print(f"jobs={jobs}: {exploration.ran} orderings in {elapsed:.1f} s = "
                  f"{rates[jobs]:.0f} orderings/min ({len(exploration.failures)} failed)")
    best = max(rates.values())
    print(f"speed-up with {cores} jobs: {rates[cores] / rates[1]:.2f}x")
    print(f"full exploration up to renaming at {best:.0f}/min: {symmetric / best:.1f} min "
          f"(without the renaming reduction: {full / best:.1f} min)")
    device.close()
    return 0


class Counting:
    """A driver that counts its runs and notes the first failing one."""

    def __init__(self, driver: ScenarioDriver) -> None:
        self.driver, self.runs, self.first_failure = driver, 0, None

    def run(self, scenario):
        from harness.drive.orderings import check

        self.runs += 1
        result = self.driver.run(scenario, allow_crash=True)
        if self.first_failure is None and check(result) is not None:
            self.first_failure = self.runs
        return result

    def run_batch(self, scenarios, jobs):
        return map(self.run, scenarios)

    def release(self, result):
        self.driver.release(result)


def shrinking(seeds: int) -> int:
    from harness.drive.search import search
    from harness.drive.orderings import random_interleavings

    sdk = discover()
    shared = compile_model(get_model("linear_relu"), "SM8650", "fp16", sdk)
    other = compile_model(get_model("mlp_tanh"), "SM8650", "fp16", sdk)
    device = SimulatorDevice(sdk, "SM8650", choose_runner("native"), jobs=1)
    plans = [ModulePlan("A", shared, load_method=False), ModulePlan("B", shared, load_method=False),
             ModulePlan("C", other, load_method=False)]
    print("bug: QNN delegate-cache (two modules of linear_relu, one of mlp_tanh; "
          "load / execute / destroy)")
    print(f"{'search':12}{'seed':>5}{'1st fail':>9}{'runs':>6}{'minimal':>8}{'wall s':>8}")
    rows = {"hand-written": [], "hypothesis": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            for kind in rows:
                counting = Counting(ScenarioDriver(device, Path(tmp) / f"{kind}{seed}", 300.0))
                started = time.perf_counter()
                if kind == "hand-written":
                    found = explore(counting, f"hw{seed}", plans,
                                    random_interleavings(plans, 12, seed), shrink_budget=40)
                else:
                    found = search(counting, f"hy{seed}", plans, examples=12, seed=seed)
                wall = time.perf_counter() - started
                minimal = len(found.failures[0].minimal) if found.failures else None
                rows[kind].append((counting.first_failure, counting.runs, minimal, wall))
                print(f"{kind:12}{seed:5}{counting.first_failure or '-':>9}{counting.runs:6}"
                      f"{minimal or '-':>8}{wall:8.1f}")
    for kind, data in rows.items():
        found = [r for r in data if r[2] is not None]
        if found:
            print(f"{kind}: found in {len(found)}/{len(data)} seeds; minimal length "
                  f"{sorted(r[2] for r in found)}; runs {sorted(r[1] for r in data)}; "
                  f"wall {sum(r[3] for r in data):.1f} s")
        else:
            print(f"{kind}: found in 0/{len(data)} seeds")
    device.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
