"""What a scenario costs on a runtime with only the pybindings (executorch 1.4.1, the Python
runner as forks of its fork server) against the native runner's forks on 1.5.1.

    python benchmarks/python_fork.py [--repeats N] [--python-release 1.4.1]

The 1.4.1 side runs in the cached venv of `python -m harness matrix` (harness/runtime/envs.py):
this script starts itself there with `--side python`, and on the global environment (1.5.1)
with `--side native`. Both sides run at once as processes of their own: each compiles
linear_relu for SM8650 fp16 with its own runtime, builds its devices
(`SimulatorDevice(isolation=...)`), runs one uncounted warm-up round of s1 and s4 (the shapes of
tests/hil/test_isolation.py), says it is ready, and then runs one scenario at a time when told.
This script interleaves them: each round runs every scenario on each side back to back, the
side that goes first alternating per round, so both sides see the same load (a side run after
the other saw another machine when other jobs came and went). The Python side also runs each
scenario as a new process, the old way (about 2 s each), in the first 3 rounds.

It prints the load average before and after, the median wall time per scenario and side, and
per scenario the ratio python-fork / native-fork: the median of the per-round ratios (each
round's two runs are neighbours in time), next to the ratio of the medians. Last line: the
worst per-round-median ratio (target: at most 3; exit 1 above).
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

CASES = ("s1", "s4")
PROCESS_ROUNDS = 3  # a new process per scenario is 2 s: a few rounds tell it
MARK = "PYTHON_FORK_BENCH "  # the sides' own lines; the libraries may print others


def _say(message: dict) -> None:
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


def side(kind: str) -> int:
    """Serve runs on this interpreter's runtime: a warm-up round, then `<case> <variant>` per
    stdin line, each answered with its wall seconds."""
    from harness.programs.compile import compile_model
    from harness.devices.simulator import SimulatorDevice
    from harness.programs.models import get_model
    from harness.qnn.sdk import discover
    from harness.runtime import executorch_version
    from harness.runner.select import choose_runner
    from harness.scenario.library import s1_two_modules, s4_cleanup_reload

    sdk = discover()
    model = compile_model(get_model("linear_relu"), "SM8650", "fp16", sdk)
    cases = {"s1": s1_two_modules(model, "A"), "s4": s4_cleanup_reload(model)}
    runner = choose_runner(kind)
    variants = ("fork", "process") if kind == "python" else ("fork",)
    devices = {v: SimulatorDevice(sdk, "SM8650", runner, isolation=v, jobs=1) for v in variants}
    runs = 0
    try:
        with tempfile.TemporaryDirectory(prefix="python-fork-") as tmp:
            def run(case: str, variant: str) -> float:
                nonlocal runs
                runs += 1
                started = time.perf_counter()
                out = devices[variant].run(cases[case], Path(tmp) / f"{case}-{variant}-{runs}",
                                           300)
                elapsed = time.perf_counter() - started
                if out.returncode not in (0, 1) or '"event": "end"' not in out.stdout:
                    raise SystemExit(f"{case} {variant}: exit {out.returncode}\n"
                                     f"{out.stderr[-2000:]}")
                return elapsed

            for case in CASES:  # warm-up: servers started, caches filled
                for variant in variants:
                    run(case, variant)
            _say({"ready": True, "executorch": executorch_version(), "runner": runner.kind,
                  "variants": list(variants)})
            for line in sys.stdin:
                if not line.strip():
                    break
                case, variant = line.split()
                _say({"elapsed": run(case, variant)})
    finally:
        for device in devices.values():
            device.close()
    return 0


class Side:
    """One side's process: started, waited for until ready, then told what to run."""

    def __init__(self, kind: str, python: str, env: dict[str, str]) -> None:
        self.kind = kind
        self.proc = subprocess.Popen([python, __file__, "--side", kind], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.info: dict = {}

    def read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        self.proc.wait()
        raise RuntimeError(f"{self.kind} side failed (exit {self.proc.returncode}):\n"
                           f"{self.proc.stderr.read()[-3000:]}")

    def ready(self) -> None:
        self.info = self.read()

    def run(self, case: str, variant: str) -> float:
        self.proc.stdin.write(f"{case} {variant}\n")
        self.proc.stdin.flush()
        return self.read()["elapsed"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--repeats", type=int, default=10, help="counted rounds (default 10)")
    parser.add_argument("--python-release", default="1.4.1",
                        help="executorch release of the Python side (default 1.4.1)")
    parser.add_argument("--side", choices=("python", "native"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return side(args.side)
    from harness.runtime.envs import runtime_venv

    venv = runtime_venv(args.python_release)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("EXECUTORCH_HIL_EXECUTORCH_PREFIX", None)
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    sides = {"native": Side("native", sys.executable, env),
             "python": Side("python", str(venv.python), env)}
    times: dict[tuple[str, str, str], list[float]] = {}
    ratios: dict[str, list[float]] = {case: [] for case in CASES}
    try:
        for s in sides.values():  # both prepare at once; the counted runs never overlap
            s.ready()
        order = list(sides.values())
        for round_ in range(args.repeats):
            for case in CASES:
                fork = {}
                for s in order if round_ % 2 == 0 else order[::-1]:
                    fork[s.kind] = s.run(case, "fork")
                    times.setdefault((s.kind, case, "fork"), []).append(fork[s.kind])
                ratios[case].append(fork["python"] / fork["native"])
                if round_ < PROCESS_ROUNDS:
                    times.setdefault(("python", case, "process"), []).append(
                        sides["python"].run(case, "process"))
    except RuntimeError as exc:
        print(exc)
        return 1
    finally:
        for s in sides.values():
            s.close()
    print(f"load average after {os.getloadavg()[0]:.1f}")
    median = {key: statistics.median(v) for key, v in times.items()}
    print(f"{'runtime':18}{'runner':8}{'scenario':18}{'median ms':>10}{'runs':>6}")
    for (kind, case, variant), value in sorted(median.items(), key=lambda kv: kv[0][0] != "native"):
        info = sides[kind].info
        print(f"{'executorch ' + info['executorch']:18}{info['runner']:8}{case + ' ' + variant:18}"
              f"{value * 1e3:10.1f}{len(times[kind, case, variant]):6d}")
    worst = 0.0
    py, nat = sides["python"].info["executorch"], sides["native"].info["executorch"]
    for case in CASES:
        ratio = statistics.median(ratios[case])
        worst = max(worst, ratio)
        of_medians = median["python", case, "fork"] / median["native", case, "fork"]
        old = median["python", case, "process"] / median["native", case, "fork"]
        print(f"{case}: python fork on {py} / native fork on {nat} = {ratio:.2f}x per round "
              f"(min {min(ratios[case]):.2f}x, max {max(ratios[case]):.2f}x; of the medians "
              f"{of_medians:.2f}x; a process per scenario: {old:.1f}x)")
    print(f"worst ratio {worst:.2f}x (target at most 3x)")
    return 0 if worst <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
