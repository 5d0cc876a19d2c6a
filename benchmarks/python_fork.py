"""What a scenario costs on a runtime with only the pybindings (executorch 1.4.1, the Python
runner as forks of its fork server) against the native runner's forks on 1.5.1.

    python benchmarks/python_fork.py [--repeats N] [--python-release 1.4.1]

The 1.4.1 side runs in the cached venv of `python -m harness matrix` (harness/runtime/envs.py):
this script starts itself there with `--side python`, and on the global environment (1.5.1)
with `--side native`. Each side compiles linear_relu for SM8650 fp16 with its own runtime, runs
one uncounted warm-up round and `--repeats` rounds of s1 and s4 (the shapes of
tests/hil/test_isolation.py) through `SimulatorDevice(isolation=...).run`, and prints the median
wall time per scenario; the Python side also as new processes, the old way (about 2 s each).
Last line: the ratio python-fork / native-fork per scenario (target: at most 3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def side(kind: str, repeats: int) -> dict:
    """Median seconds per scenario (and variant) on this interpreter's runtime."""
    from harness.programs.compile import compile_model
    from harness.devices.simulator import SimulatorDevice
    from harness.programs.models import get_model
    from harness.qnn.sdk import discover, executorch_version
    from harness.runner.select import choose_runner
    from harness.scenario.library import s1_two_modules, s4_cleanup_reload

    sdk = discover()
    model = compile_model(get_model("linear_relu"), "SM8650", "fp16", sdk)
    cases = {"s1": s1_two_modules(model, "A"), "s4": s4_cleanup_reload(model)}
    runner = choose_runner(kind)
    variants = ("fork", "process") if kind == "python" else ("fork",)
    devices = {v: SimulatorDevice(sdk, "SM8650", runner, isolation=v, jobs=1) for v in variants}
    times: dict[str, list[float]] = {f"{c} {v}": [] for c in cases for v in variants}
    try:
        with tempfile.TemporaryDirectory(prefix="python-fork-") as tmp:
            for round_ in range(repeats + 1):
                for case, sc in cases.items():
                    for variant, device in devices.items():
                        if variant == "process" and round_ > min(repeats, 3):
                            continue  # 2 s each: a few rounds tell it
                        started = time.perf_counter()
                        out = device.run(sc, Path(tmp) / f"{case}-{variant}-{round_}", 300)
                        elapsed = time.perf_counter() - started
                        if out.returncode not in (0, 1) or '"event": "end"' not in out.stdout:
                            raise SystemExit(f"{case} {variant}: exit {out.returncode}\n"
                                             f"{out.stderr[-2000:]}")
                        if round_:
                            times[f"{case} {variant}"].append(elapsed)
    finally:
        for device in devices.values():
            device.close()
    return {"executorch": executorch_version(), "runner": runner.kind,
            "median_s": {k: statistics.median(v) for k, v in times.items() if v},
            "n": {k: len(v) for k, v in times.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--python-release", default="1.4.1")
    parser.add_argument("--side", choices=("python", "native"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.side, args.repeats)))
        return 0
    from harness.runtime.envs import runtime_venv

    venv = runtime_venv(args.python_release)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("EXECUTORCH_HIL_EXECUTORCH_PREFIX", None)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    results = {}
    for kind, python in (("native", sys.executable), ("python", str(venv.python))):
        proc = subprocess.run([python, __file__, "--side", kind, "--repeats", str(args.repeats)],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{kind} side failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
            return 1
        results[kind] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{'runtime':18}{'runner':8}{'scenario':18}{'median ms':>10}{'runs':>6}")
    for kind, res in results.items():
        for key, value in res["median_s"].items():
            print(f"{'executorch ' + res['executorch']:18}{res['runner']:8}{key:18}"
                  f"{value * 1e3:10.1f}{res['n'][key]:6d}")
    worst = 0.0
    for case in ("s1", "s4"):
        ratio = results["python"]["median_s"][f"{case} fork"] / \
            results["native"]["median_s"][f"{case} fork"]
        old = results["python"]["median_s"][f"{case} process"] / \
            results["native"]["median_s"][f"{case} fork"]
        worst = max(worst, ratio)
        print(f"{case}: python fork on {results['python']['executorch']} / native fork on "
              f"{results['native']['executorch']} = {ratio:.2f}x (a process per scenario: "
              f"{old:.1f}x)")
    print(f"worst ratio {worst:.2f}x (target at most 3x)")
    return 0 if worst <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
