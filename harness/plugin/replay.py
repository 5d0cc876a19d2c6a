"""Every failure's message (or an xfail's reason) ends with the `python -m harness replay ...`
command for the run it failed on (harness/replay.py), so a failing run can be run again on its
own without reading the artifacts first."""

from __future__ import annotations

import pytest

from harness.plugin.keys import DRIVER
from harness.results.failures import failure_of, run_failures


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Outside harness/plugin/known_issues.py's wrapper (registered after it): sees the outcome
    after a known issue that does not cover the failure has turned the xfail into a failure."""
    report = yield
    if report.when == "call" and call.excinfo and (report.failed or hasattr(report, "wasxfail")):
        _add_replay_command(report, _replay_command(item, call.excinfo.value))
    return report


def _add_replay_command(report: pytest.TestReport, command: str) -> None:
    """End a failure's message (or an xfail's reason) with the replay command."""
    if not command:
        return
    if hasattr(report, "wasxfail"):
        report.wasxfail = f"{report.wasxfail}; replay: {command}"
    elif isinstance(report.longrepr, str):
        report.longrepr = f"{report.longrepr}\n\nreplay: {command}"
    elif callable(getattr(report.longrepr, "addsection", None)):  # keeps the traceback
        report.longrepr.addsection("replay", f"replay: {command}")  # type: ignore[union-attr]


def _replay_command(item: pytest.Item, exc: BaseException) -> str:
    """`python -m harness replay ...` for the run a failed HIL test failed on: the run its
    failure names (of several launches of that scenario, the last one with a failure, each
    with its own directory), else its last run with a failure, else its last run ("" without
    runs)."""
    from harness.results import command_line

    driver = item.stash.get(DRIVER, None)
    if driver is None:
        return ""
    kept = [(r, r.artifacts) for r in driver.results if r.artifacts is not None]
    if not kept:
        return ""
    named = [k for k in kept if k[0].scenario.name == failure_of(exc).scenario]
    failed = [k for k in kept if run_failures(k[0])]
    chosen = ([k for k in named if any(k[0] is f[0] for f in failed)] or named or failed
              or kept)[-1]
    return command_line(chosen[1], driver.device.replay_args())
