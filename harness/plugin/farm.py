"""A labgrid farm run (--lg-place-tags): before a test, a phone that dropped off for good is
replaced by another place's; each report carries the place it ran on and the farm's events,
which the controller records for the summary (harness/devices/farm.py has the farm itself)."""

from __future__ import annotations

import pytest

from harness.errors import HarnessError
from harness.plugin.keys import SESSION, is_hil
from harness.session import HilSession


def pytest_configure(config: pytest.Config) -> None:
    if config.stash[SESSION].uses_farm:
        config.pluginmanager.register(_FarmReports(config.stash[SESSION]), "hil-farm-reports")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a labgrid farm: a phone that dropped off for good during an earlier test is replaced
    by another place's before this test's fixtures are set up."""
    session = item.config.stash.get(SESSION, None)
    if session is not None and session.uses_farm and is_hil(item):
        try:
            session.fail_over()
        except HarnessError as exc:
            pytest.fail(f"HIL device unavailable: {exc}", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    hil = item.config.stash.get(SESSION, None)
    if hil is not None and hil.farm_label is not None and is_hil(item):
        report.hil_device = hil.farm_label  # travels to the xdist controller with the report
        report.hil_farm_events = hil.new_farm_events()
    return report


class _FarmReports:
    """Registered on a labgrid farm run: records which device each test ran on, from the
    reports (in the xdist controller, the workers' reports carry it)."""

    def __init__(self, session: HilSession) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        label = getattr(report, "hil_device", None)
        if label is None:
            return
        if self.session.farm_label is None:  # the controller: the workers' events arrive here
            self.session.add_notices({e: e for e in getattr(report, "hil_farm_events", [])})
        if report.when == "call" or (report.when == "setup" and not report.passed):
            xfailed = hasattr(report, "wasxfail") and report.skipped
            self.session.record_test(label, report.nodeid, "xfailed" if xfailed else report.outcome)
