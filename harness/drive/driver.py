"""The scenario driver a test author uses: run a scenario on the session's device, get a result.

It stages the scenario, runs it through the device with the session's runner and timeout,
joins events with the QNN trace, keeps the artifacts (scenario, events, stderr, trace, device
logs) in the test's artifacts directory, and turns a crash or hang into a test failure that
names the signal, the last completed step and the log tail.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from collections.abc import Iterable, Iterator

from harness.results.assertions import (assert_completed, assert_nemesis, assert_no_memory_errors,
                                        unreachable)
from harness.devices.base import Device
from harness.errors import ModelError
from harness.log import disk_full_tolerated, notice
from harness.programs.pte import check_file
from harness.protocol.nemesis import check_hold_timeouts
from harness.qnn.trace import parse_trace
from harness.results.run import ScenarioResult
from harness.scenario import Scenario


_log = logging.getLogger("harness.drive")

RUN_RECORD = "replay.json"
"""What `python -m harness replay` and `export` need beside scenario.json: the scenario with
host paths, each module's model (backend, SoC, precision: the scenario file names only the
program), the steps allowed to fail, the device and runtime the run had, and once the test
has ended the checks it made of the run (harness/replay.py reads it)."""

LAUNCH_SUFFIX = ".launch-"
"""Between a scenario's name and its launch number in the artifacts directory of its second
and later launches (`ScenarioDriver.run_dir`)."""

RETAIN_PASSED = 100
"""Checked-and-passed runs a driver keeps for the report (`release`); --hil-report-max-runs's
default keeps as many."""


class ScenarioDriver:
    def __init__(self, device: Device, artifacts: Path, timeout: float,
                 defer_artifacts: bool = False) -> None:
        """`defer_artifacts`: a run that exited 0 keeps its output in memory until
        `write_artifacts()` (the `scenario_driver` fixture calls it only for a test whose
        artifacts are kept), since the explorer's thousands of passing runs would otherwise
        each write four files that a passing test deletes; any other run is written at once."""
        self.device = device
        self.artifacts = artifacts
        self.timeout = timeout
        self.defer_artifacts = defer_artifacts
        self.results: list[ScenarioResult] = []
        self.omitted = 0  # runs `release` dropped from `results` (counted in reports)
        self._released = 0
        self._unwritten: list[ScenarioResult] = []
        self._programs_checked: dict[Path, tuple[int, int]] = {}  # path -> (mtime_ns, size)
        self._launches: dict[str, int] = {}  # scenario name -> launches so far (`run_dir`)
        self._launch_lock = threading.Lock()  # run_batch's threads name their runs too

    def run(self, scenario: Scenario, allow_crash: bool = False,
            timeout: float | None = None) -> ScenarioResult:
        return self._record(self._execute(scenario, timeout), allow_crash)

    def run_batch(self, scenarios: Iterable[Scenario], jobs: int = 1) -> Iterator[ScenarioResult]:
        """Run independent scenarios, up to `jobs` at once (each in its own fresh process
        state), as `run` would one by one: results come back, and are kept for the report,
        in the scenarios' order whichever finishes first; a crash raises at its turn."""
        if jobs <= 1:
            yield from map(self.run, scenarios)
            return
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for result in pool.map(self._execute, scenarios):
                yield self._record(result, allow_crash=False)

    def _check_files(self, scenario: Scenario) -> None:
        """Every file the scenario names exists, and every program is an ExecuTorch program: a
        file that is not one never reaches a runner, since what a runtime does with one (the
        1.5.1 pybindings abort) would be reported as a runtime crash. A program is read once
        per size and modification time (the explorer runs one program thousands of times)."""
        programs = {model.pte for model in scenario.models.values()}
        for path in scenario.files():
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is None or not stat.S_ISREG(st.st_mode):
                raise ModelError(f"scenario {scenario.name}: file {path} does not exist "
                                 "(a deleted compile cache entry? rerun to recompile)")
            seen = (st.st_mtime_ns, st.st_size)
            if path in programs and self._programs_checked.get(path) != seen:
                check_file(path)
                self._programs_checked[path] = seen

    def _record(self, result: ScenarioResult, allow_crash: bool) -> ScenarioResult:
        self.results.append(result)
        if result.scenario.qnn_nemesis:
            assert_nemesis(result)
            for text in unreachable(result):
                # Said once per scenario and rule: the verdict is on the run that happened.
                notice(_log, f"scenario {result.scenario.name}: forced interleaving "
                       f"unreachable on this runtime, judged on the run that happened: {text}",
                       key=f"unreachable {result.scenario.name} {text}")
        if not allow_crash:
            assert_completed(result)
            assert_no_memory_errors(result)  # under --valgrind: at its turn, like a crash
        return result

    def _execute(self, scenario: Scenario, timeout: float | None = None) -> ScenarioResult:
        self._check_files(scenario)
        if scenario.qnn_nemesis:
            check_hold_timeouts(scenario.qnn_nemesis, timeout or self.timeout)
        out_dir = self.run_dir(scenario)
        output = self.device.run(scenario, out_dir, timeout or self.timeout)
        result = ScenarioResult.build(scenario, output, parse_trace(output.trace_text), out_dir)
        if self.defer_artifacts and output.returncode == 0 and not output.timed_out:
            self._unwritten.append(result)
        else:
            self._keep(result, out_dir, self.device)
        return result

    def run_dir(self, scenario: Scenario) -> Path:
        """The artifacts directory of this launch of `scenario`: `<artifacts>/<name>` for its
        first launch, `<name>.launch-N` for its N-th. A test that launches one scenario until it
        fails (S5 cold: up to 200 launches) keeps each launch's own evidence: in one directory,
        the passing launches written at the test's end (`write_artifacts`) replaced the crash
        its failure message and `replay:` line name."""
        with self._launch_lock:
            n = self._launches[scenario.name] = self._launches.get(scenario.name, 0) + 1
        return self.artifacts / (scenario.name if n == 1 else f"{scenario.name}{LAUNCH_SUFFIX}{n}")

    def release(self, result: ScenarioResult) -> None:
        """The caller checked `result` and found nothing wrong. The first `RETAIN_PASSED` such
        runs stay in `results` for the report; later ones leave it (and their artifacts are
        never written), counted in `omitted`: an exploration of 126126 orderings held every
        result in memory (14 GB) for a report that keeps 100 passing runs a test."""
        self._released += 1
        if self._released <= RETAIN_PASSED:
            return
        for held in (self.results, self._unwritten):
            for i in range(len(held) - 1, -1, -1):
                if held[i] is result:
                    del held[i]
                    break
        self.omitted += 1

    def write_artifacts(self) -> None:
        """Write the artifacts of the runs `defer_artifacts` held back."""
        unwritten, self._unwritten = self._unwritten, []
        for result in unwritten:
            assert result.artifacts is not None  # run() gave each deferred result its out_dir
            self._keep(result, result.artifacts, self.device)

    def record_checks(self) -> None:
        """Add to each kept run's record the checks the test made of it (called once the
        test has ended), so that replay judges a replay by them."""
        for result in self.results:
            path = result.artifacts / RUN_RECORD if result.artifacts is not None else None
            if result.checks and path is not None and path.is_file():
                try:
                    record = json.loads(path.read_text())
                except ValueError:  # cut short by a full disk: that run has no record
                    continue
                record["checks"] = list(result.checks)
                with disk_full_tolerated(self.artifacts, "a run's record"):
                    path.write_text(json.dumps(record, indent=1, default=str))

    @staticmethod
    def _keep(result: ScenarioResult, out_dir: Path, device: Device) -> None:
        """The run's artifacts (record, scenario, output, trace, result.json); a full disk
        leaves them incomplete, with one notice, and never changes the run's verdict."""
        with disk_full_tolerated(out_dir.parent, "a run's artifacts"):
            ScenarioDriver._write(result, out_dir, device)

    @staticmethod
    def _write(result: ScenarioResult, out_dir: Path, device: Device) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_run_record(out_dir / RUN_RECORD, result.scenario, device)
        if not (out_dir / "scenario.json").exists():  # a fork's was in memory
            result.scenario.write(out_dir / "scenario.json", lambda p: str(Path(p).absolute()))
        out = result.output
        (out_dir / "runner.stdout").write_text(out.stdout)
        (out_dir / "runner.stderr").write_text(out.stderr)
        (out_dir / "qnn_trace.txt").write_text(out.trace_text)
        for name, text in out.logs.items():
            (out_dir / f"{name}.txt").write_text(text)
        steps = [{"step": s.step.describe(), "status": s.status, "event": s.event, "trace": s.trace}
                 for s in result.steps]
        summary = {"runner": out.runner, "returncode": out.returncode, "timed_out": out.timed_out,
                   "pushes": out.pushes, "steps": steps}
        # One line: json's C encoder; with indent it falls back to Python, at about 6 ms for
        # the memory readings of a small scenario, which the explorer pays thousands of times.
        (out_dir / "result.json").write_text(json.dumps(summary))


def write_run_record(path: Path, scenario: Scenario, device: Device) -> None:
    """The run's record for replay and export (`RUN_RECORD`)."""
    from harness.runtime import executorch_version

    info = device.info
    models = {module: {"name": m.name, "backend": m.backend, "soc": m.soc,
                       "precision": m.precision, "pte": str(Path(m.pte).absolute()),
                       "reference": m.reference}
              for module, m in scenario.models.items()}
    # The scenario as the host reads it: an adb device keeps its own copy, with the device's
    # relative paths, as scenario.json.
    host = scenario.to_json(lambda p: str(Path(p).absolute()))
    record = {"scenario": scenario.name, "host_scenario": host, "models": models,
              "allowed_errors": sorted(scenario.allowed_errors),
              "device": {"serial": info.serial, "kind": info.kind, "soc": info.soc,
                         "abi": info.abi, "android": info.android, "details": info.details},
              "runner": device.runner_kind, "executorch": executorch_version()}
    if scenario.launch:  # the cause the runner started under: replay and exports start it so
        record["launch"] = [launch.to_json() for launch in scenario.launch]
    path.write_text(json.dumps(record, indent=1, default=str))
