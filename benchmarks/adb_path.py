"""The adb path against the simulator, side by side in one run: what a scenario costs on a
loopback device (the real adb server, adbutils, the harness's adb device code, a Python adbd)
next to the same scenario on the host HTP simulator, and what a second device buys a suite.

1. Per scenario: S1 and S4 (harness.scenario.library, as tests/hil/test_isolation.py runs them) on
   linear_relu fp16, `--repeats` rounds after one uncounted warm-up round (which pushes the
   program and its tensors and starts the device's fork server), each round running every
   scenario on every target with the order alternating per round. Each run is
   `ScenarioDriver.run` (what a test calls), timed from call to return; every target runs the
   same native runner on the same simulator libraries. "simulator" and "loopback" fork a
   pre-loaded runner per scenario (the default, --scenario-isolation fork: on the device a
   `harness-runner --serve` held open in its workspace); "sim-process" and "loop-process" start
   a runner process per scenario (--scenario-isolation process). The ratio of each pair is the
   adb path's cost. Each run gets a scenario of its own (a new run directory and scenario file
   on the device, as in a suite). Also counted: adb round trips per scenario (connections to
   the adb server, and requests on the fork server's held-open stream). Goal: loopback /
   simulator at most 1.3x.

2. Suite throughput: `pytest tests/hil [-k SELECTION]` with `--device=A` and with `-n 2
   --device=A --device=B`, wall time of the whole pytest process (start-up, collection, the
   tests), `--suite-rounds` rounds alternating the order, for each selection (default: the
   twelve tests of `-k "fp16 and not orderings"`, then all of tests/hil). Goal: two devices at
   least 1.6x one. The loopback devices run their programs on this machine's cores, so two
   "devices" share the CPUs with each other and with both pytest workers: on a 2-core machine
   this measures the harness's overhead and the CPU the machine has, not what two phones would
   give. `--simulator-reference` adds the same selections on the simulator with one and two
   workers: what a second worker gets from these CPUs with no adb at all.

Both loopback devices are `python -m harness.loopback` processes (a phone is another machine; an
adbd inside this process would take CPU from the client side it is measured against).

    python benchmarks/adb_path.py [--repeats N] [--suite-rounds N] [--selection EXPR ...]
                                  [--simulator-reference] [--skip-suite] [--skip-scenarios]

Exit status: 0 when every run ended as expected (the same step outcomes on both targets; the
suites exit 0), 1 otherwise. Goals not met are reported, not failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SCENARIO_GOAL = 1.3
SUITE_GOAL = 1.6
DEFAULT_SELECTIONS = ["fp16 and not orderings", ""]


def options(artifacts: Path, devices: list[str], isolation: str = "fork"):
    from harness.config.options import Options

    return Options(devices=devices, simulator=not devices, soc=None, device_config=None,
                   artifacts_dir=artifacts, keep_artifacts=False, runner="native",
                   runner_timeout=None, abi_bridge="auto", keep_workspace=False,
                   device_workspace=None, worker="master", worker_count=1,
                   session_id=f"adb-path-bench-{os.getpid()}", scenario_isolation=isolation)


class Loopback:
    """`python -m harness.loopback` in a process of its own, attached to the adb server."""

    def __init__(self, sandbox: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.loopback", "--sandbox", str(sandbox)],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("serial: "):
            self.stop()
            raise SystemExit(f"loopback did not start: {line!r} {self.proc.stderr.read()}")
        self.serial = line.split()[1]

    def cpu_seconds(self) -> float:
        """CPU the device has used: its adbd and every command it ran, the runners among them
        (children's time counts once they are reaped; a session's fork servers end with it)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def stats(values: list[float]) -> str:
    return (f"{statistics.median(values):8.3f} {min(values):7.3f} {max(values):7.3f}")


def bench_scenarios(serial: str, repeats: int, work: Path) -> bool:
    from harness.devices.adb import fork as adb_fork
    from harness.drive.driver import ScenarioDriver
    from harness.scenario.library import s1_two_modules, s4_cleanup_reload
    from harness.session import HilSession

    sim = HilSession(options(work / "sim", []))
    sim_process = HilSession(options(work / "sim-process", [], "process"))
    model = sim.model("linear_relu", "fp16")
    adb_session = HilSession(options(work / "adb", [serial]))
    device = adb_session.device
    calls = [0]
    make_connection = device.adb.client.make_connection
    send = adb_fork.DeviceForkServer.send

    def counted(*args, **kwargs):
        calls[0] += 1
        return make_connection(*args, **kwargs)

    def counted_send(server, request):
        calls[0] += 1
        return send(server, request)

    device.adb.client.make_connection = counted
    adb_fork.DeviceForkServer.send = counted_send
    # Both targets fork a pre-loaded runner per scenario by default (--scenario-isolation
    # fork: on the device a `harness-runner --serve` in its workspace), and both start a runner
    # process per scenario with --scenario-isolation process ("-process"): the ratio of each
    # pair is what the adb path costs. One device session serves both loopback targets (a
    # second session would wait for the device's lease), switching its isolation per run.
    targets = {"simulator": (sim.device, None), "sim-process": (sim_process.device, None),
               "loopback": (device, "fork"), "loop-process": (device, "process")}
    drivers = {t: ScenarioDriver(d, work / f"{t}-runs", 300) for t, (d, _) in targets.items()}
    makers = {"s1": lambda n: s1_two_modules(model, name=n),
              "s4": lambda n: s4_cleanup_reload(model, name=n)}
    pairs = {"loopback": "simulator", "loop-process": "sim-process"}
    times = {(s, t): [] for s in makers for t in drivers}
    ratios = {(s, t): [] for s in makers for t in pairs}
    adb_calls = {(s, t): [] for s in makers for t in pairs}
    ok = True
    try:
        for round_ in range(repeats + 1):
            for scenario, make in makers.items():
                order = list(drivers) if round_ % 2 == 0 else list(reversed(drivers))
                elapsed, outcome = {}, {}
                for target in order:
                    if targets[target][1]:
                        device.isolation = targets[target][1]
                    before = calls[0]
                    started = time.perf_counter()
                    result = drivers[target].run(make(f"{scenario}-{target}-r{round_}"),
                                                 allow_crash=True)
                    elapsed[target] = time.perf_counter() - started
                    outcome[target] = [s.status for s in result.steps]
                    if target in pairs:
                        adb_calls[(scenario, target)].append(calls[0] - before)
                if len({tuple(o) for o in outcome.values()}) != 1:
                    ok = False
                    print(f"MISMATCH {scenario} round {round_}: {outcome}")
                if round_ == 0:
                    continue  # warm-up: first pushes, the device's servers start, page cache
                for target in drivers:
                    times[(scenario, target)].append(elapsed[target])
                for target, reference in pairs.items():
                    ratios[(scenario, target)].append(elapsed[target] / elapsed[reference])
    finally:
        adb_fork.DeviceForkServer.send = send
        device.isolation = "fork"
        adb_session.close()
        sim.close()
        sim_process.close()
    print(f"\n1. Per scenario ({repeats} rounds after a warm-up; wall seconds of "
          "ScenarioDriver.run)\n")
    print("scenario target        median s   min s   max s  adb round trips")
    print("-" * 66)
    for scenario in makers:
        for target in drivers:
            per = (f"{statistics.median(adb_calls[(scenario, target)][1:]):>9.0f}"
                   if target in pairs else f"{'-':>9}")
            print(f"{scenario:8} {target:12} {stats(times[(scenario, target)])}  {per}")
        for target, reference in pairs.items():
            ratio = statistics.median(ratios[(scenario, target)])
            extra = (statistics.median(times[(scenario, target)]) -
                     statistics.median(times[(scenario, reference)]))
            how = ("both fork a pre-loaded runner, the default" if target == "loopback"
                   else "both start a runner process per scenario")
            goal = (f"; goal <= {SCENARIO_GOAL}x: {'met' if ratio <= SCENARIO_GOAL else 'NOT met'}"
                    if target == "loopback" else "")
            print(f"         ratio {target}/{reference} {ratio:.2f}x (median of per-round "
                  f"ratios; {how}), adb path {extra * 1000:+.0f} ms{goal}")
        first = {t: adb_calls[(scenario, t)][0] for t in pairs}
        print(f"         adb round trips per scenario (connections to the adb server and "
              f"requests to the device's fork server): {first['loopback']} and "
              f"{first['loop-process']} in the warm-up round (the model's files checked and "
              f"pushed, the server started), then "
              f"{statistics.median(adb_calls[(scenario, 'loopback')][1:]):.0f} and "
              f"{statistics.median(adb_calls[(scenario, 'loop-process')][1:]):.0f}")
    return ok


def busy_cpu_seconds() -> float:
    """CPU seconds this machine has spent busy since boot, all processes (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_suite(devices: list[Loopback], workers: int, selection: str,
              work: Path) -> tuple[float, str, int, float, float]:
    """One pytest process over tests/hil (`-k selection` unless empty); no devices: the
    simulator. Also returns the machine's busy CPU seconds meanwhile (runners, adbds, the adb
    server and pytest all run here) and the devices' share of them."""
    argv = [sys.executable, "-m", "pytest", "tests/hil", "-q", "-p", "no:cacheprovider",
            f"--artifacts-dir={work}"]
    argv += ["-k", selection] if selection else []
    argv += [f"--device={d.serial}" for d in devices]
    argv += ["-n", str(workers)] if workers > 1 else []
    device_cpu = sum(d.cpu_seconds() for d in devices)
    started, busy = time.perf_counter(), busy_cpu_seconds()
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    busy = busy_cpu_seconds() - busy
    device_cpu = sum(d.cpu_seconds() for d in devices) - device_cpu
    summary = next((l.strip("= ") for l in reversed(proc.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed|xfailed|error)", l)), "no summary")
    if proc.returncode != 0:
        print(proc.stdout[-3000:] + proc.stderr[-2000:])
    return (elapsed, re.sub(r"(, \d+ warnings?)? in [\d.]+s.*", "", summary), proc.returncode,
            busy, device_cpu)


def bench_suite(loopbacks: list[Loopback], rounds: int, selections: list[str], simulator: bool,
                work: Path) -> bool:
    print(f"\n2. Suite throughput: pytest tests/hil, one device vs two ({rounds} round(s), order "
          "alternating; wall seconds of the whole pytest process)")
    variants = {"one device": (loopbacks[:1], 1), "two devices, -n 2": (loopbacks[:2], 2)}
    if simulator:
        variants.update({"simulator, 1 worker": ([], 1), "simulator, -n 2": ([], 2)})
    ok = True
    for selection in selections:
        print(f"\n  -k {selection!r}" if selection else "\n  all of tests/hil")
        times: dict[str, list[float]] = {v: [] for v in variants}
        cores: dict[str, list[float]] = {v: [] for v in variants}
        busy_s: dict[str, list[float]] = {v: [] for v in variants}
        device_s: dict[str, list[float]] = {v: [] for v in variants}
        for round_ in range(rounds):
            order = list(variants) if round_ % 2 == 0 else list(reversed(variants))
            for name in order:
                devices, workers = variants[name]
                elapsed, summary, code, busy, device_cpu = run_suite(
                    devices, workers, selection, work / f"{len(times[name])}-{workers}")
                times[name].append(elapsed)
                cores[name].append(busy / elapsed)
                busy_s[name].append(busy)
                device_s[name].append(device_cpu)
                ok = ok and code == 0
                print(f"    round {round_} {name:20} {elapsed:7.1f} s  exit {code}  "
                      f"{busy / elapsed:.2f} cores busy ({busy:.1f} CPU s, the devices' "
                      f"{device_cpu:.1f})  {summary}")
        one, two = (statistics.median(times[v]) for v in ("one device", "two devices, -n 2"))
        need = statistics.median(busy_s["two devices, -n 2"])  # CPU s of the two-device run
        floor = need / os.cpu_count()
        own = statistics.median(device_s["one device"])
        print(f"    two devices / one: {one:.1f} s / {two:.1f} s = {one / two:.2f}x; goal >= "
              f"{SUITE_GOAL}x: {'met' if one / two >= SUITE_GOAL else 'NOT met'}")
        print(f"    one device keeps {statistics.median(cores['one device']):.2f} of this "
              f"machine's {os.cpu_count()} cores busy, {own:.1f} CPU s of its {one:.1f} s its "
              f"own work (runners, adbd: a phone's, here this machine's); the two-device run "
              f"needs {need:.1f} CPU s, so on "
              f"{os.cpu_count()} cores it cannot take under {floor:.1f} s: at most "
              f"{one / floor:.2f}x here")
        if simulator:
            s1, s2 = (statistics.median(times[v]) for v in ("simulator, 1 worker",
                                                             "simulator, -n 2"))
            print(f"    for reference, the simulator with two workers / one: {s1:.1f} s / "
                  f"{s2:.1f} s = {s1 / s2:.2f}x (what this machine's {os.cpu_count()} CPUs give "
                  "a second worker without adb; the loopback devices share the same CPUs)")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--suite-rounds", type=int, default=1)
    parser.add_argument("--selection", action="append", default=None, metavar="EXPR",
                        help="a -k expression over tests/hil (repeatable; '' for all of it); "
                             f"default: {DEFAULT_SELECTIONS}")
    parser.add_argument("--simulator-reference", action="store_true",
                        help="also run each selection on the simulator with one and two workers")
    parser.add_argument("--skip-suite", action="store_true")
    parser.add_argument("--skip-scenarios", action="store_true")
    args = parser.parse_args(argv)

    import adbutils
    import executorch  # noqa: F401
    from harness.loopback import start_server
    from harness.runtime import executorch_version

    print(f"executorch {executorch_version()}, adbutils {adbutils.__version__}, Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    start_server()
    ok = True
    with tempfile.TemporaryDirectory(prefix="adb-path-bench-") as tmp:
        work = Path(tmp)
        devices = [Loopback(work / "phone-a")]
        try:
            if not args.skip_suite:
                devices.append(Loopback(work / "phone-b"))
            print("loopback devices: " + ", ".join(d.serial for d in devices))
            if not args.skip_scenarios:
                ok = bench_scenarios(devices[0].serial, args.repeats, work / "scenarios") and ok
            if not args.skip_suite:
                ok = bench_suite(devices, args.suite_rounds,
                                 args.selection if args.selection is not None
                                 else DEFAULT_SELECTIONS, args.simulator_reference,
                                 work / "suite") and ok
        finally:
            for device in devices:
                device.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
