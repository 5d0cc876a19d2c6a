"""The project's own test run: each test's CPU time, beside the wall time pytest records.

Why: on a 2-core machine the README's test command is CPU-bound, so what it costs is CPU
seconds, and a test's wall time under xdist depends on what the other worker was doing. Each
test (setup, call and teardown) gets a `cpu_s` property in the JUnit report: this process's
user and system time plus its reaped children's (a sub-session, an export, a build), which
`benchmarks/ci_durations.py --junitxml` sums per file. A long-lived child (a fork server)
counts only when it is reaped, so a HIL suite's scenarios count where their server ends.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

_STARTED = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_STARTED] = _cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, None, None]:
    if call.when == "teardown" and _STARTED in item.stash:
        # Before the teardown report is made: it copies item.user_properties.
        item.user_properties.append(("cpu_s", f"{_cpu_seconds() - item.stash[_STARTED]:.1f}"))
    yield
