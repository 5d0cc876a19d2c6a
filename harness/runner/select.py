"""Chooses the runner for a session: native by default, Python when no native build is possible.

The native runner starts in about 0.1 s where a Python process spends over a second importing,
and every scenario is a fresh process, so native is the default wherever it can be built.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from harness.errors import HarnessError

RUNNERS = ("auto", "native", "python")
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class RunnerChoice:
    kind: str  # "native" or "python"
    binary: Path | None  # the native runner binary
    notice: str = ""  # one line for the session header when we fell back
    argv: tuple[str, ...] = ()  # an explicit command prefix (tests use it for stand-ins)

    def command(self, scenario: str) -> list[str]:
        if self.argv:
            return [*self.argv, scenario]
        if self.kind == "native":
            return [str(self.binary), scenario]
        return [sys.executable, "-m", "harness.runner.python_runner", scenario]

    def environment(self) -> dict[str, str]:
        if self.kind == "python":
            path = os.environ.get("PYTHONPATH", "")
            return {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)}
        return {}


def choose_runner(requested: str) -> RunnerChoice:
    if requested not in RUNNERS:
        raise HarnessError(f"--runner must be one of {', '.join(RUNNERS)}, not {requested!r}")
    if requested == "python":
        return RunnerChoice("python", None)
    from harness.runner import native_build

    available, why = native_build.host_runner_available()
    if not available:
        if requested == "native":
            raise HarnessError(f"--runner=native: the native runner cannot be built here: {why}")
        return RunnerChoice("python", None, f"native runner unavailable ({why}); using the Python runner")
    try:
        return RunnerChoice("native", native_build.build_host_runner())
    except native_build.RunnerBuildError as exc:
        if requested == "native":
            raise HarnessError(f"--runner=native: {exc}") from exc
        first = str(exc).splitlines()[0]
        return RunnerChoice("python", None, f"native runner build failed ({first}); using the Python runner")
