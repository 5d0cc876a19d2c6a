"""The plugin's state on pytest's config and items (StashKeys), shared by its modules and by
harness/report/plugin.py. Public: code outside the plugin reads these, not private names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    # Type parameters only: the keys are made at import, and every plugin module imports this
    # one, so importing the driver, the results and the session here would load them before
    # pytest has parsed a single option (in a session that may never run a HIL test).
    from harness.drive.driver import ScenarioDriver
    from harness.results.known_issues import KnownIssue
    from harness.session import HilSession

# config: this process's HilSession (one per pytest process, per xdist worker); set by
# pytest_configure (harness/plugin/session.py) once the options passed the start-up checks.
SESSION: pytest.StashKey[HilSession] = pytest.StashKey()
# config: node id -> the test's reports so far (setup, call, teardown), for scenario_driver's
# decision to keep or remove the test's artifacts.
REPORTS = pytest.StashKey[dict]()
# item: the known issue a collected test is a strict xfail of.
ISSUE: pytest.StashKey[KnownIssue] = pytest.StashKey()
# Every entry that names the test, ISSUE first: a failure of the run is excused by any of them
# (a race with two endings, each its own bug).
TEST_ISSUES = pytest.StashKey[list]()
# config: every loaded KnownIssue (the project's file and --known-issues files).
ISSUES = pytest.StashKey[list]()
# config: known issue id -> node ids of the tests that ran and failed as it says (XFAIL).
MET = pytest.StashKey[dict]()
# config: paths of the collected test files (for stale known issues).
FILES = pytest.StashKey[set]()
# config: (issue id, test pattern) pairs that matched a collected test.
PATTERNS = pytest.StashKey[set]()
# config: harness.runtime.PREFIX_ENV as it was before this session selected the runtime
# (None: unset), restored at unconfigure so a session in this process leaves it as it was.
PREFIX_ENV = pytest.StashKey[str | None]()
# config: harness.runtime.variants.ENV as it was before this session chose its runtime variant.
VARIANT_ENV = pytest.StashKey[str | None]()
# config: the SIGTERM handler this session replaced, restored at unconfigure.
SIGTERM = pytest.StashKey[Any]()  # signal.getsignal's: a handler, SIG_DFL/SIG_IGN or None

# item: the test's ScenarioDriver (the scenario_driver fixture's), whose runs the known-issue
# verdict, the replay line and the report read.
DRIVER: pytest.StashKey[ScenarioDriver] = pytest.StashKey()

# The marker of a HIL test: a test that runs scenarios on the session's device. Collection gives
# it to every test that uses the device (harness/plugin/suites.py); a test may also carry it.
HIL_MARKER = "hil"


def is_hil(item: pytest.Item) -> bool:
    """Whether `item` is a HIL test (it carries the hil marker)."""
    return item.get_closest_marker(HIL_MARKER) is not None


# The environment variable that gives a session its id (else a timestamp and the pid).
SESSION_ID_ENV = "EXECUTORCH_HIL_SESSION_ID"
