"""Wall time and peak RSS of one scenario run per runner, side by side in one interleaved run.

Variants, each a fresh process per run, all with the HTP simulator environment of
`harness.qnn.sdk.discover().environment(trace)`:

  native         the native lifecycle runner (`build_host_runner()`), `[binary, scenario.json]`
  python         the Python lifecycle runner, `python -m harness.runner.python_runner scenario.json`
  bare           no harness: a tiny script doing the same pybindings calls through
                 `executorch.extension.pybindings._C` (`_load_program`, `load_method`, `call`,
                 `del`): the floor for any Python-based runner
  bare-portable  the same script importing the public `executorch.extension.pybindings.portable_lib`
                 (which imports all of exir)

Scenarios from harness.scenario.library (the ones tests/hil/test_isolation.py runs), model linear_relu
compiled for SM8650 fp16:

  s1  two modules of one .pte, both execute, destroy A, execute B, destroy B
  s4  three cycles of: load A and B, execute A, destroy A, load A, destroy A and B

Rounds are interleaved (every round runs every scenario with every variant, the variant order
rotating per round) so machine noise hits all variants alike; a warm-up round is not counted.
Read the numbers side by side within one run, not as absolute targets.

    python benchmarks/runner_startup.py [--repeats N] [--scenario s1|s4|all] [--warmup N]

Exit status: 0 when every run ended as expected, 1 otherwise. A run that exits 1 ("a step
failed" in docs/runner-protocol.md) is expected only where device_configs/known_issues.yaml
lists the scenario's test as a known bug for this executorch version (S1 on 1.5.1), and only
when the failed step is the one the bug breaks and the output carries the bug's own words.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from harness.protocol.wire import EVENT_PREFIX  # noqa: E402  (after the path set-up above)

VARIANTS = ("native", "python", "bare", "bare-portable")
RUN_TIMEOUT_S = 300.0
BARE_FAILED = "BARE_FAILED "

# The bare variants: the same pybindings calls as the Python runner, in scenario order, and
# nothing else (no events, no output checks, no memory readings). Reading the scenario JSON
# keeps the call sequence identical to the runners'; it costs microseconds.
BARE_SCRIPT = '''\
import json
import sys

import numpy as np
import torch

if sys.argv[1] == "portable":
    from executorch.extension.pybindings import portable_lib as et
else:
    from executorch.extension.pybindings import _C as et

steps = json.load(open(sys.argv[2]))["steps"]
modules, methods, failed = {}, {}, 0
for index, step in enumerate(steps):
    op, name = step["op"], step.get("module")
    try:
        if op == "load_module":
            modules[name], methods[name] = et._load_program(step["pte"]), {}
        elif op == "execute":
            loaded = methods[name]
            if step["method"] not in loaded:
                loaded[step["method"]] = modules[name].load_method(step["method"])
            inputs = [torch.from_numpy(np.fromfile(t["file"], dtype=t["dtype"]).reshape(t["shape"]))
                      for t in step["inputs"]]
            loaded[step["method"]].call(inputs)
        elif op == "destroy_module":
            methods.pop(name).clear()
            del modules[name]
        elif op != "snapshot":
            sys.exit(f"bare: unsupported op {op}")
    except RuntimeError as exc:  # S1 on executorch 1.5.1: the survivor's execute fails
        failed += 1
        print(f"BARE_FAILED {index} {exc}", flush=True)
sys.exit(1 if failed else 0)
'''


@dataclass
class Case:
    """One scenario as the benchmark runs it."""

    key: str  # s1, s4
    path: Path  # scenario.json
    nodeid: str  # the test it mirrors, for the known-issues lookup
    expected_failed_steps: frozenset[int] = frozenset()  # what the known bug breaks
    known_issue: object = None  # harness.results.known_issues.KnownIssue when it applies here


@dataclass
class Sample:
    wall_s: float
    maxrss_kib: int
    returncode: int
    verdict: str  # "ok", "expected", or a failure description


@dataclass
class Series:
    samples: list[Sample] = field(default_factory=list)

    @property
    def walls(self) -> list[float]:
        return [s.wall_s for s in self.samples]

    @property
    def failures(self) -> list[str]:
        return [s.verdict for s in self.samples if s.verdict not in ("ok", "expected")]


def build_cases(which: str, work: Path):
    from harness.programs.compile import compile_model
    from harness.results.known_issues import issue_for, load_known_issues
    from harness.programs.models import get_model
    from harness.qnn.sdk import discover
    from harness.runtime import executorch_version
    from harness.scenario.library import s1_two_modules, s4_cleanup_reload

    sdk = discover()
    model = compile_model(get_model("linear_relu"), "SM8650", "fp16", sdk)
    issues = load_known_issues()
    version = executorch_version()
    cases = []
    if which in ("s1", "all"):
        sc = s1_two_modules(model, "A")
        survivor_execute = 5  # load A, load B, execute A, execute B, destroy A, *execute B*
        nodeid = "tests/hil/test_isolation.py::test_s1_two_modules_same_program[A]"
        cases.append(Case("s1", sc.write(work / "s1.json"), nodeid,
                          frozenset({survivor_execute}), issue_for(nodeid, version, issues)))
    if which in ("s4", "all"):
        sc = s4_cleanup_reload(model)
        nodeid = "tests/hil/test_isolation.py::test_s4_cleanup_and_reload"
        cases.append(Case("s4", sc.write(work / "s4.json"), nodeid,
                          known_issue=issue_for(nodeid, version, issues)))
    return sdk, cases


def commands(work: Path):
    """Command builders per variant, the native binary, and the Python runner's environment."""
    from harness.runner.builds.host import build_host_runner
    from harness.runner.select import RunnerChoice

    native = RunnerChoice("native", build_host_runner())
    python = RunnerChoice("python", None)
    bare = work / "bare.py"
    bare.write_text(BARE_SCRIPT)
    return {
        "native": native.command,
        "python": python.command,
        "bare": lambda scenario: [sys.executable, str(bare), "c", scenario],
        "bare-portable": lambda scenario: [sys.executable, str(bare), "portable", scenario],
    }, native.binary, python.environment()


def run_once(argv: list[str], env: dict[str, str], cwd: Path, out: Path, err: Path):
    """Wall seconds, peak RSS (KiB, from wait4), exit code (negative: signal) of one child."""
    with open(out, "wb") as fout, open(err, "wb") as ferr:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=fout, stderr=ferr)
        watchdog = threading.Timer(RUN_TIMEOUT_S, _kill, (proc.pid,))
        watchdog.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            watchdog.cancel()
        wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped by wait4; tell Popen so it does not wait again
    return wall, usage.ru_maxrss, code


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def failed_steps(variant: str, stdout: str) -> set[int]:
    steps = set()
    for line in stdout.splitlines():
        if variant.startswith("bare") and line.startswith(BARE_FAILED):
            steps.add(int(line[len(BARE_FAILED):].split()[0]))
        elif line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except ValueError:
                continue
            if event.get("event") == "step" and event.get("status") != "ok":
                steps.add(event["index"])
    return steps


def judge(case: Case, variant: str, code: int, out: Path, err: Path) -> str:
    if code == 0:
        return "ok"
    stdout = out.read_text(errors="replace")
    text = stdout + err.read_text(errors="replace")
    issue = case.known_issue
    if code == 1 and issue is not None and case.expected_failed_steps:
        got = failed_steps(variant, stdout)
        if got == case.expected_failed_steps and (not issue.match or re.search(issue.match, text)):
            return "expected"
        why = f"failed steps {sorted(got)}, expected {sorted(case.expected_failed_steps)}"
        if issue.match and not re.search(issue.match, text):
            why += f"; output lacks {issue.match!r}"
        return f"exit 1 but not as known issue {issue.id}: {why}"
    tail = "\n      ".join(text.strip().splitlines()[-8:])
    what = f"signal {-code}" if code < 0 else f"exit {code}"
    return f"{what}:\n      {tail}"


def ratio_of(series: dict[str, Series], num: str, den: str) -> float | None:
    """Median of the per-round ratios: each round ran both variants close together in time."""
    a, b = series.get(num), series.get(den)
    if not a or not b or not a.samples or len(a.samples) != len(b.samples):
        return None
    return statistics.median(x / y for x, y in zip(a.walls, b.walls))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="counted rounds (default 5)")
    parser.add_argument("--scenario", choices=("s1", "s4", "all"), default="all")
    parser.add_argument("--warmup", type=int, default=1,
                        help="uncounted rounds first, to warm the page cache (default 1)")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # the table, then notes, in order with stderr
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")

    from harness.runtime import executorch_version

    with tempfile.TemporaryDirectory(prefix="runner-startup-") as tmp:
        work = Path(tmp)
        sdk, cases = build_cases(args.scenario, work)
        cmd, binary, python_env = commands(work)
        trace = work / "qnn_trace.txt"
        env = {**os.environ, **sdk.environment(trace), **python_env}

        import torch

        print("environment")
        print(f"  executorch {executorch_version()}, torch {torch.__version__}, "
              f"python {platform.python_version()}, {platform.machine()}, "
              f"os.cpu_count() {os.cpu_count()}, usable CPUs {len(os.sched_getaffinity(0))}, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"  QNN {sdk.source}; native runner {binary}")
        print(f"  {args.repeats} counted round(s) after {args.warmup} warm-up round(s); "
              f"variant order rotates per round")
        print(flush=True)

        results = {c.key: {v: Series() for v in VARIANTS} for c in cases}
        warmup_failures: list[tuple[str, str, str]] = []
        started = time.perf_counter()
        for round_ in range(-args.warmup, args.repeats):
            shift = round_ % len(VARIANTS)
            order = VARIANTS[shift:] + VARIANTS[:shift]
            for case in cases if round_ % 2 == 0 else reversed(cases):
                for variant in order:
                    out, err = work / f"{variant}.out", work / f"{variant}.err"
                    trace.unlink(missing_ok=True)
                    wall, rss, code = run_once(cmd[variant](str(case.path)), env, work, out, err)
                    verdict = judge(case, variant, code, out, err)
                    if round_ >= 0:
                        results[case.key][variant].samples.append(Sample(wall, rss, code, verdict))
                    elif verdict not in ("ok", "expected"):
                        warmup_failures.append((case.key, variant, f"(warm-up) {verdict}"))
            label = "warm-up" if round_ < 0 else f"round {round_ + 1}/{args.repeats}"
            print(f"  {label} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr,
                  flush=True)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)

    print_table(cases, results)
    print(f"children's CPU time in total: user {usage.ru_utime:.1f} s, sys {usage.ru_stime:.1f} s")
    print()
    failures = warmup_failures + [(c.key, v, f) for c in cases for v in VARIANTS
                                  for f in dict.fromkeys(results[c.key][v].failures)]
    notes(cases, results)
    if failures:
        print("\nFAILED runs:")
        for key, variant, why in failures:
            print(f"  {key} {variant}: {why}")
        return 1
    return 0


def print_table(cases, results) -> None:
    header = (f"{'scenario':<9}{'variant':<15}{'median s':>9}{'min s':>8}{'max s':>8}"
              f"{'peak RSS MiB':>14}{'x native':>10}  {'exit':<14}")
    print(header)
    print("-" * len(header))
    for case in cases:
        series = results[case.key]
        for variant in VARIANTS:
            s = series[variant]
            if not s.samples:
                continue
            walls = s.walls
            rss = max(x.maxrss_kib for x in s.samples) / 1024
            ratio = ratio_of(series, variant, "native")
            codes = sorted({x.returncode for x in s.samples})
            kinds = {x.verdict if x.verdict in ("ok", "expected") else "FAILED" for x in s.samples}
            exit_text = ",".join(map(str, codes)) + (" (expected)" if kinds == {"expected"} else
                                                      " FAILED" if "FAILED" in kinds else "")
            print(f"{case.key:<9}{variant:<15}{statistics.median(walls):>9.3f}{min(walls):>8.3f}"
                  f"{max(walls):>8.3f}{rss:>14.1f}"
                  f"{(f'{ratio:.2f}' if ratio is not None else '-'):>10}  {exit_text:<14}")
        parts = []
        for num, den in (("python", "native"), ("bare", "native"), ("bare-portable", "native"),
                         ("python", "bare")):
            r = ratio_of(series, num, den)
            if r is not None:
                parts.append(f"{num}/{den} {r:.2f}")
        py, bare = series["python"].walls, series["bare"].walls
        if py and len(py) == len(bare):
            parts.append(f"python - bare {statistics.median(a - b for a, b in zip(py, bare)):+.3f} s")
        print(f"{'':<9}ratios: " + ", ".join(parts))
    print()
    print("Wall: spawn to reap, per run. Peak RSS: ru_maxrss of the child from os.wait4, the "
          "largest over the counted rounds. Ratios: median of the per-round ratios (each round "
          "ran all variants back to back).")


def notes(cases, results) -> None:
    for case in cases:
        issue = case.known_issue
        if issue is None:
            continue
        passed = [v for v in VARIANTS if any(x.verdict == "ok" for x in results[case.key][v].samples)]
        print(f"note: {case.key} exits 1 on this executorch version (runner protocol: exit 1 = a "
              f"step failed) because of known issue {issue.id}: the survivor's execute (step "
              f"{', '.join(map(str, sorted(case.expected_failed_steps)))}) fails with "
              f"{issue.match!r}. Exit 1 there is expected, not a benchmark failure; the bare "
              f"scripts catch that execute's exception and go on.")
        if passed:
            print(f"note: {case.key} passed with {', '.join(passed)}: the known issue may be fixed "
                  f"in this runtime (see device_configs/known_issues.yaml).")


if __name__ == "__main__":
    sys.exit(main())
