"""The project's own test run: each test's CPU time, beside the wall time pytest records.

Why: on a 2-core machine the README's test command is CPU-bound, so what it costs is CPU
seconds, and a test's wall time under xdist depends on what the other worker was doing. Each
test (setup, call and teardown) gets a `cpu_s` property in the JUnit report: this process's
user and system time plus its reaped children's (a sub-session, an export, a build), which
`benchmarks/ci_durations.py --junitxml` sums per file. A long-lived child (a fork server)
counts only when it is reaped, so a HIL suite's scenarios count where their server ends.

And `sessions_started_here_are_not_xdist_workers`, the fixture every framework and end-to-end
test uses (tests/framework/conftest.py, tests/e2e/conftest.py) for the pytest sessions it
starts.
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


XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
# pytest plugins that other packages of this environment register (hypothesis, hydra,
# pytest-benchmark, kgb, anyio) and that neither the harness nor its suites use (the ordering
# search calls hypothesis's `find`, not its pytest integration). Loading them costs about 3 s
# of the 4 s a pytest session takes to start here (hypothesis's terminal summary alone imports
# all of hypothesis), and these tests start about a hundred sessions.
UNUSED_PLUGINS = ("hypothesispytest", "hydra_pytest", "benchmark", "kgb", "anyio")


@pytest.fixture
def sessions_started_here_are_not_xdist_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `pytest -n N`, this process's worker variables would make every pytest session a
    test starts (pytester, subprocess) worker gwK of an N-worker run, which with one device is a
    usage error ("more workers than devices"); and the project's `-n auto` would give each such
    session workers of its own (one per CPU, under a test that already has one). A test that
    wants either sets it itself (`-n 2`). Those sessions also leave out the environment's
    UNUSED_PLUGINS. The framework's tests and the end-to-end ones (tests/framework, tests/e2e)
    use it in every test; the HIL suites start no sessions."""
    for name in XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "0")
    blocked = " ".join(f"-p no:{name}" for name in UNUSED_PLUGINS)
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} {blocked}".strip())
