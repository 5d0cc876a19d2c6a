"""Known issues (harness/results/known_issues.py) as pytest sees them: collected tests of an
entry become strict xfails, a failure the entry does not cover fails the test, tests that
XFAILed count as met, and entries that match no collected test are stale."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.paths import IN_CHECKOUT
from harness.plugin.keys import (DRIVER, FILES, ISSUE, ISSUES, MET, PATTERNS, SESSION,
                                 TEST_ISSUES, is_hil)
from harness.runtime import executorch_version
from harness.results.failures import failure_of, failure_parts, run_failures
from harness.results.known_issues import DEFAULT_PATH, KnownIssue, issues_for, uncovered

STRICT_KEY = "hil_strict_known_issues"  # a worker's --strict-known-issues error, in workeroutput


def pytest_configure(config: pytest.Config) -> None:
    config.stash[MET] = {}
    config.pluginmanager.register(_KnownIssuesMet(config), "hil-known-issues-met")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests of known issues as strict xfails (before -k/-m deselection, so an entry
    counts as matched whatever subset runs)."""
    if config.getoption("ignore_known_issues"):
        return
    issues = config.stash.get(ISSUES, [])
    version = executorch_version()
    qairt = config.stash[SESSION].qairt
    pairing = config.stash[SESSION].pairing
    # A library-side or environment entry under a mismatched pairing says so in its verdict.
    pairing_note = ("; under a mismatched SDK pairing (" + pairing.describe().split("; pairing")[0]
                    + ")") if pairing.matched is False else ""
    if not config.getoption("valgrind", None):
        issues = [i for i in issues if not i.valgrind_only]
    config.stash[FILES] = {item.path for item in items}
    config.stash[PATTERNS] = set()
    for item in items:
        if not is_hil(item):
            continue
        name = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
        shapes = _program_shapes(item)
        found = issues_for(item.path, name, version, issues, qairt, shapes)
        if found:
            issue = found[0]
            patterns = config.stash[PATTERNS]
            for each in found:
                patterns.update((each.id, p) for p in each.matching_patterns(item.path, name))
            item.stash[ISSUE] = issue
            item.stash[TEST_ISSUES] = found
            # An intermittent issue's test passes in a run that did not meet it (XPASS), and
            # so does a test named by one entry and covered by another's program shape.
            intermittent = any(i.intermittent for i in found)
            by_shape = any(not i.matches_test(item.path, name) for i in found)
            also = f" (or {', '.join(i.id for i in found[1:])})" if found[1:] else ""
            reason = (f"known {'intermittent ' if intermittent else ''}issue {issue.id}{also} "
                      f"[{issue.where}] on executorch {version}: {issue.reason.split('. ')[0]}"
                      + (pairing_note if issue.where in ("qnn", "environment") else ""))
            if not any(i.matches_test(item.path, name) for i in found):
                # Covered by the program's shape alone: not every test of such a program
                # meets the defect, so the test runs plain and a pass is a PASS; a failure
                # that is every way the entries say becomes their xfail (makereport).
                item.stash[SHAPE_ONLY] = reason
                continue
            item.add_marker(pytest.mark.xfail(raises=AssertionError,
                strict=not (intermittent or by_shape), reason=reason))
    stale = unmatched_issues(config)
    if stale and config.getoption("strict_known_issues"):
        message = (
            "--strict-known-issues: known issues for executorch " + version + " that match no "
            "collected test (stale or misspelt entries):\n  " + "\n  ".join(
                f"{i.id} in {i.source}: tests {', '.join(i.tests)}" for i in stale))
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is None:
            raise pytest.UsageError(message)
        # An xdist worker: a UsageError raised here crashed the controller (INTERNALERROR in
        # worker_workerfinished, exit 3). The worker runs nothing and hands the message to the
        # controller, which ends the session with it as the same usage error (exit 4).
        workeroutput[STRICT_KEY] = message
        config.hook.pytest_deselected(items=list(items))
        items[:] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """The innermost of the plugin's makereport wrappers (this module registers before
    harness/plugin/replay.py): an xfail turned into a failure here gets its replay command."""
    report = yield
    issue = item.stash.get(ISSUE, None)
    if issue is not None and report.when == "call":
        report.hil_known_issue = issue.id  # travels to the xdist controller with the report
    shape_reason = item.stash.get(SHAPE_ONLY, "")
    if (issue is not None and shape_reason and report.when == "call" and report.failed
            and call.excinfo and isinstance(call.excinfo.value, AssertionError)):
        problem = _not_this_issue(item, item.stash.get(TEST_ISSUES, [issue]),
                                  call.excinfo.value)
        if problem:
            report.longrepr = f"{problem}\n\nthe test's failure:\n{call.excinfo.value}"
        else:
            report.outcome = "skipped"
            report.wasxfail = shape_reason
        return report
    if issue is not None and hasattr(report, "wasxfail") and call.excinfo:
        problem = _not_this_issue(item, item.stash.get(TEST_ISSUES, [issue]),
                                  call.excinfo.value)
        if problem:
            # Failed, but not only the way the known issue fails: a new bug, not this one.
            del report.wasxfail
            report.outcome = "failed"
            report.longrepr = f"{problem}\n\nthe test's failure:\n{call.excinfo.value}"
    return report


GLOBBED = pytest.StashKey[dict]()
"""(base, a pattern's file part) -> the files it names, resolved (unmatched_issues)."""

SHAPE_ONLY = pytest.StashKey[str]()
"""The xfail reason of a test that known issues cover by its program's shape alone."""


def _program_shapes(item: pytest.Item) -> frozenset[str] | None:
    """The shapes inspect finds in the user's program (--pte) a test runs, None for a test of
    a built-in model or none (a program that cannot be read fails in its own test)."""
    from harness.errors import HarnessError
    from harness.programs.pte_reader import read_program

    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("hil_program") if callspec is not None else None
    pte = getattr(param, "pte", None)
    if pte is None:
        return None
    try:
        return read_program(pte).shapes
    except HarnessError:
        return None


class _KnownIssuesMet:
    """Counts a known issue as met by the tests that ran and failed as it says (XFAIL), not by
    every collected test it applies to: a `-k` selection or a skip meets nothing. (Under xdist
    the workers' reports arrive here in the controller, which prints the line.)"""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.strict_error = ""

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """The controller: a worker that found stale entries under --strict-known-issues."""
        message = getattr(node, "workeroutput", {}).get(STRICT_KEY)
        if message:
            self.strict_error = message

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.strict_error and not hasattr(self.config, "workeroutput"):
            import sys

            sys.stderr.write(f"ERROR: {self.strict_error}\n")
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        issue = getattr(report, "hil_known_issue", None)
        if issue and report.when == "call" and hasattr(report, "wasxfail") and report.skipped:
            self.config.stash[MET].setdefault(issue, []).append(report.nodeid)


def _not_this_issue(item: pytest.Item, entries: list[KnownIssue], exc: BaseException) -> str:
    """Why this failure is not (only) the test's known issues, or "" when every failure of the
    run is one of them."""
    driver = item.stash.get(DRIVER, None)
    failures = [f for r in (driver.results if driver else []) for f in run_failures(r)]
    raised = failure_of(exc)
    if raised.kind == "check" or not failures:
        failures += failure_parts(exc)
    missed = uncovered(entries, failures)
    if not missed:
        return ""
    said = " or ".join(e.describe() for e in entries)
    lines = [f"known issue {said} does not cover every failure of this run:"]
    for f in failures:
        mark = "not covered" if f in missed else "covered    "
        lines.append(f"  {mark} {f.describe()}")
    first = missed[0]
    lines.append(f"first failure not covered ({first.kind}):\n    " +
                 "\n    ".join(first.message.strip().splitlines()[:15]))
    return "\n".join(lines)


def unmatched_issues(config: pytest.Config) -> list[KnownIssue]:
    """Entries for this ExecuTorch version with a test pattern that no collected test matched,
    among patterns whose test file this run collected or that name no existing file at all (a
    misspelt path). A pattern for a suite the run did not select is not stale."""
    version = executorch_version()
    session = config.stash.get(SESSION, None)
    qairt = session.qairt if session is not None else None
    matched = config.stash.get(PATTERNS, set())
    collected = {Path(f).resolve() for f in config.stash.get(FILES, set())}
    # The session's files each pattern names, globbed once: this runs at collection, in the
    # summary and for the report, and 30 entries' patterns cost about 50 ms to glob each time.
    globbed = config.stash.setdefault(GLOBBED, {})
    stale = []
    for issue in config.stash.get(ISSUES, []):
        if not issue.applies_to(version, qairt):
            continue
        if issue.valgrind_only and not config.getoption("valgrind", None):
            continue  # met only under --valgrind: not marked, so not stale
        for pattern in issue.tests:
            if (issue.id, pattern) in matched:
                continue
            file_pattern = (issue.base, pattern.split("::")[0])
            if file_pattern not in globbed:
                globbed[file_pattern] = {f.resolve() for f in issue.base.glob(file_pattern[1])}
            files = globbed[file_pattern]
            if not files and issue.source == DEFAULT_PATH and not IN_CHECKOUT:
                continue  # the project's entry for a test that does not ship in the wheel
            if not files or files & collected:
                stale.append(issue)
                break
    return stale
