"""Ordering exploration throughput: orderings explored per minute, one at a time and on every
core, and the pruning factor of treating modules of one program as interchangeable.

    python benchmarks/exploration.py [--sample 300] [--program xnn_convs|linear_relu]

Runs a sample of the three-module exhaustive exploration (load / load-method / execute /
unload-method / destroy per module, every ordering up to renaming the modules) on the HTP
simulator with the native runner, side by side with jobs=1 and jobs=<cores>, and prints the
measured rates and what they make of the full exploration's wall time.
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

from harness.compile import compile_model  # noqa: E402
from harness.devices.simulator import SimulatorDevice  # noqa: E402
from harness.driver import ScenarioDriver  # noqa: E402
from harness.models import get_model  # noqa: E402
from harness.orderings import ModulePlan, explore, interleavings, pruning_factor  # noqa: E402
from harness.qnn.sdk import discover  # noqa: E402
from harness.runner.select import choose_runner  # noqa: E402

PROGRAMS = {"xnn_convs": ("fp32", ("conv_nobias",)), "linear_relu": ("fp16", ("forward",))}


def count(iterator) -> int:
    return sum(1 for _ in iterator)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300, help="orderings per measurement")
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="xnn_convs")
    args = parser.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
