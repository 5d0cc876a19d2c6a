"""The same scenario run two ways (a fork and a process, on the simulator or a device) must
give the same verdict: statuses, error codes, live QNN counts and output hashes, step by step."""

from __future__ import annotations

from harness.results.run import ScenarioResult


def same_steps(fork: ScenarioResult, process: ScenarioResult) -> None:
    assert fork.output.returncode == process.output.returncode
    assert len(fork.steps) == len(process.steps)
    for i, (f, p) in enumerate(zip(fork.steps, process.steps)):
        where = f"{fork.scenario.name} step {i} {f.step.describe()}"
        assert f.status == p.status, f"{where}: fork {f.describe()} vs process {p.describe()}"
        assert (f.event or {}).get("error_code") == (p.event or {}).get("error_code"), where
        assert f.live == p.live, f"{where}: fork {f.live} vs process {p.live}"
        assert ([o["sha256"] for o in (f.event or {}).get("outputs", [])] ==
                [o["sha256"] for o in (p.event or {}).get("outputs", [])]), where
