"""The host HTP simulator as a device: runners run as local child processes.

Each run gets its own QNN trace file and scenario directory under the test's artifacts, and
the QNN environment of `harness.qnn.sdk` (interposer first on the library path).
"""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

from harness.devices.base import Device, DeviceInfo
from harness.memory import ALLOCATOR_ENV
from harness.process import run_process
from harness.qnn.sdk import QnnSdk
from harness.result import RunOutput
from harness.runner.select import RunnerChoice
from harness.scenario import Scenario


class SimulatorDevice(Device):
    def __init__(self, sdk: QnnSdk, soc: str, runner_for: Callable[[str], RunnerChoice],
                 abi_bridge: str = "auto") -> None:
        self.sdk = sdk
        self.runner_for = runner_for
        self.abi_bridge = abi_bridge
        self.info = DeviceInfo("simulator", "simulator", soc, platform.machine(),
                               details={"qnn": sdk.source})

    def scratch_dir(self) -> str:
        if not hasattr(self, "_scratch"):
            self._scratch = tempfile.TemporaryDirectory(prefix="executorch-hil-scratch-")
        return self._scratch.name

    def command(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout + proc.stderr

    def close(self) -> None:
        if hasattr(self, "_scratch"):
            self._scratch.cleanup()

    def run(self, scenario: Scenario, artifacts: Path, timeout: float, runner: str) -> RunOutput:
        choice = self.runner_for(runner)
        artifacts.mkdir(parents=True, exist_ok=True)
        trace = artifacts / "qnn_trace.txt"
        trace.unlink(missing_ok=True)
        scenario_file = scenario.write(artifacts / "scenario.json")
        env = {**os.environ, **ALLOCATOR_ENV, **self.sdk.environment(trace, self.abi_bridge),
               **choice.environment()}
        proc = run_process(choice.command(str(scenario_file)), env, timeout)
        return RunOutput(proc.returncode, proc.stdout, proc.stderr,
                         trace.read_text() if trace.exists() else "", proc.timed_out, choice.kind)
