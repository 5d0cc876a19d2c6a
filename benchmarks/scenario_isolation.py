"""What a scenario costs as a fork of the pre-loaded runner, as a new process, and bare; and the
HIL suite's wall time with the defaults against one new process per scenario, one at a time.

    python benchmarks/scenario_isolation.py [--repeats N] [--skip-suite] [--suite-args ...]

Part 1, per scenario (interleaved rounds after an uncounted warm-up, the variant order
rotating per round), on the HTP simulator with the native runner:

  fork     SimulatorDevice(isolation="fork").run: a fork of `harness-runner --serve`, which
           has loaded the QNN libraries when the scenario has a QNN program
  process  SimulatorDevice(isolation="process").run: a new runner process per scenario
  bare     the runner binary on the same scenario file with the same environment, output
           thrown away: no harness at all (the floor of a new process)

Scenarios: s1 and s4 (linear_relu fp16 on QNN, as tests/hil/test_isolation.py), x3 (one
three-module XNNPACK ordering of the exhaustive exploration, xnn_convs), snap (one snapshot
step: the cost of a process that does nothing).

Part 2, the suite: `pytest tests/hil` with the defaults (fork, one job per CPU) and with
`--scenario-isolation process --scenario-jobs 1`, one after the other, each writing JUnit XML;
prints both wall times, their ratio, and whether every test has the same outcome in both.

Exit status 1 when a scenario run fails unexpectedly or the two suite runs disagree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from harness.programs.compile import compile_model  # noqa: E402
from harness.devices.simulator import SimulatorDevice  # noqa: E402
from harness.protocol.memory import ALLOCATOR_ENV  # noqa: E402
from harness.programs.models import get_model  # noqa: E402
from harness.drive.orderings import ModulePlan, interleavings, to_scenario  # noqa: E402
from harness.qnn.sdk import discover  # noqa: E402
from harness.runner.select import choose_runner  # noqa: E402
from harness.scenario import Scenario  # noqa: E402
from harness.scenario.library import s1_two_modules, s4_cleanup_reload  # noqa: E402

VARIANTS = ("fork", "process", "bare")


def scenarios() -> dict[str, Scenario]:
    sdk = discover()
    qnn = compile_model(get_model("linear_relu"), "SM8650", "fp16", sdk)
    xnn = compile_model(get_model("xnn_convs"), "SM8650", "fp32", sdk)
    plans = [ModulePlan(m, xnn, ("conv_nobias",)) for m in "ABC"]
    ordering = next(iter(interleavings(plans, symmetric=True)))
    return {"s1": s1_two_modules(qnn, "A"), "s4": s4_cleanup_reload(qnn),
            "x3": to_scenario("x3", plans, ordering), "snap": Scenario("snap").snapshot()}


def per_scenario(repeats: int, work: Path) -> bool:
    sdk = discover()
    runner = choose_runner("native")
    devices = {iso: SimulatorDevice(sdk, "SM8650", runner, isolation=iso, jobs=1)
               for iso in ("fork", "process")}
    cases = scenarios()
    times: dict[tuple[str, str], list[float]] = {(c, v): [] for c in cases for v in VARIANTS}
    ok = True
    expected_rc = {"s1": 1}  # the known delegate-cache bug on 1.5.1: the survivor's execute
    try:
        for round_ in range(repeats + 1):
            for case, sc in cases.items():
                order = VARIANTS[round_ % 3:] + VARIANTS[:round_ % 3]
                for variant in order:
                    out_dir = work / f"{case}-{variant}-{round_}"
                    started = time.perf_counter()
                    if variant == "bare":
                        rc = bare_run(runner.binary, sc, sdk, out_dir)
                    else:
                        rc = devices[variant].run(sc, out_dir, 300).returncode
                    elapsed = time.perf_counter() - started
                    if rc not in (0, expected_rc.get(case, 0)):
                        print(f"{case} {variant}: exit {rc} (see {out_dir})")
                        ok = False
                    if round_:
                        times[case, variant].append(elapsed)
    finally:
        for device in devices.values():
            device.close()
    print(f"{'scenario':9}{'variant':9}{'median ms':>10}{'min ms':>9}{'max ms':>9}"
          f"{'x bare':>8}")
    for case in cases:
        floor = statistics.median(times[case, "bare"])
        for variant in VARIANTS:
            series = times[case, variant]
            med = statistics.median(series)
            print(f"{case:9}{variant:9}{med * 1e3:10.1f}{min(series) * 1e3:9.1f}"
                  f"{max(series) * 1e3:9.1f}{med / floor:8.2f}")
        ratio = statistics.median(f / p for f, p in zip(times[case, "fork"],
                                                        times[case, "process"]))
        print(f"{'':9}fork/process {ratio:.2f} (median of per-round ratios)")
    return ok


def bare_run(binary: Path, sc: Scenario, sdk, out_dir: Path) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = sc.write(out_dir / "scenario.json")
    env = {**os.environ, **ALLOCATOR_ENV, **sdk.environment(out_dir / "trace.txt")}
    return subprocess.run([str(binary), str(path)], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode


def suite(extra: list[str], work: Path) -> bool:
    runs = {"defaults": [], "process, 1 job": ["--scenario-isolation", "process",
                                              "--scenario-jobs", "1"]}
    outcomes, walls = {}, {}
    for label, args in runs.items():
        xml = work / f"{label.split(',')[0]}.xml"
        argv = [sys.executable, "-m", "pytest", "tests/hil", "-q", "-p", "no:cacheprovider",
                "--strict-known-issues", f"--junitxml={xml}", *args, *extra]
        started = time.perf_counter()
        proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True)
        walls[label] = time.perf_counter() - started
        tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
        print(f"{label:15} {walls[label]:7.1f} s  exit {proc.returncode}  {tail}")
        outcomes[label] = junit_outcomes(xml)
    a, b = outcomes.values()
    differ = sorted(t for t in set(a) | set(b) if a.get(t) != b.get(t))
    print(f"process,1 job / defaults: {walls['process, 1 job'] / walls['defaults']:.2f}x; "
          f"{len(a)} tests, {len(differ)} with different outcomes")
    for test in differ:
        print(f"  {test}: {a.get(test)} vs {b.get(test)}")
    return not differ and bool(a)


def junit_outcomes(path: Path) -> dict[str, str]:
    outcomes = {}
    if not path.is_file():
        return outcomes
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        skipped = case.find("skipped")
        if skipped is not None and skipped.get("type") == "pytest.xfail":
            kinds = ["xfailed"]
        outcomes[name] = kinds[0] if kinds else "passed"
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--skip-suite", action="store_true")
    parser.add_argument("--suite-args", nargs=argparse.REMAINDER, default=[],
                        help="more pytest arguments for both suite runs (e.g. -k isolation)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="scenario-isolation-") as tmp:
        ok = per_scenario(args.repeats, Path(tmp))
        if not args.skip_suite:
            ok = suite(args.suite_args, Path(tmp)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
