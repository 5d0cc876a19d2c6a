"""End-to-end tests: what the framework hands over, run as its user runs it, each file in the CI
step whose subject it is rather than in the README's test command (`python -m pytest`, CI step
1, whose `testpaths` are tests/hil and tests/framework).

Each file runs a whole flow outside the test's own process, as a user would (a pytest session
over a suite, then `replay`, `export` and the export's own CMake build; a bug-report folder
made and run; an unpacked release wheel as the runtime under test), a minute or more of CPU
each, and the step that has its subject ran much of the same flow again: step 6 replayed and
exported the same S1 and S4 runs by hand, step 6b runs every bug-report folder in a fresh venv,
step 8 runs the same isolation suite on other releases. Each flow now runs once, in that step,
with every assertion it had in step 1 ([what moved where](../../docs/ci-coverage.md#what-moved-where)):

    python -m pytest tests/e2e                          # all of them (about 4 minutes of CPU)
    python -m pytest tests/e2e/test_replay_export.py    # one

A file missing from CI_STEP is a collection error, and tests/framework/test_ci_steps.py holds
`.ci/run` to running each file in its step.
"""

from pathlib import Path

import pytest

CI_STEP = {
    "test_replay_export.py": "6",  # replay and export
    "test_bug_report_folders.py": "6c",  # the memory defects' folders, as a user makes them
    "test_executorch_prefix.py": "8",  # the runtime under test as an input
}
"""Each file and the `.ci/run` step that runs it."""


@pytest.fixture(autouse=True)
def _nested_sessions(sessions_started_here_are_not_xdist_workers: None) -> None:
    """Every session these tests start is a plain one (tests/conftest.py says why)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "simulator: needs the QNN HTP simulator "
                                       "(see tests/framework/conftest.py)")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups, as tests/framework's
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        path = Path(item.path)
        if path.parent != here:
            continue
        if path.name not in CI_STEP:
            raise pytest.UsageError(f"{path}: add it to CI_STEP in {__file__} with the "
                                    ".ci/run step that runs it")
        item.add_marker(pytest.mark.simulator)
        item.add_marker(pytest.mark.xdist_group(path.stem))  # its module fixtures built once
