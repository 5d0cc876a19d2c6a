"""The pytest plugin: options, fixtures and hooks of the HIL framework.

Registered through the `pytest11` entry point, so `pytest --device=<serial>` works in any
checkout where the package is installed. Fixtures for test authors:

- `hil_device`: the session's device (simulator by default; the worker's `--device` under xdist);
- `compiled_model(name, precision="fp16", **options)`: a registry model compiled for the
  device's SoC, with QNN compile options such as `multi_contexts=True, spill_fill=True`;
- `scenario_driver`: runs a `Scenario` on the device and returns a `ScenarioResult`;
- `hil_session`: everything else (configs, tolerances, the runner choice).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable

import pytest

from harness.programs.compile import CompiledModel
from harness.devices.kinds import kind_for, session_kinds, session_targets
from harness.scenario.driver import ScenarioDriver
from harness.errors import HarnessError
from harness.results.failures import failure_of, run_failures
from harness.results.known_issues import DEFAULT_PATH, KnownIssue, issue_for, uncovered
from harness.config.paths import IN_CHECKOUT
from harness.programs.params import MARKER, params_for, unique_ids, unmet_needs
from harness.qnn.sdk import executorch_version
from harness.session import HilSession, Options
from harness.xdist_order import balanced_order

from harness.plugin.keys import (FILES, ISSUE, ISSUES, MET, PATTERNS, PREFIX_ENV, REPORTS,
                                 SESSION, SESSION_ID_ENV, SIGTERM)

# The old private names, for one release: use harness.plugin.keys.
_SESSION_KEY, _REPORTS_KEY, _ISSUE_KEY, _ISSUES_KEY = SESSION, REPORTS, ISSUE, ISSUES
_MET_KEY, _FILES_KEY, _PATTERNS_KEY, _PREFIX_ENV_KEY = MET, FILES, PATTERNS, PREFIX_ENV
_SIGTERM_KEY, _SESSION_ID_ENV = SIGTERM, SESSION_ID_ENV
# The hil options, and reading and checking them: harness/plugin/options.py. JUnit properties
# and --hil-report (HTML page, results.json): harness/report/plugin.py.
pytest_plugins = ["harness.plugin.options", "harness.report.plugin"]


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser,
                                  args: list[str]) -> None:
    """--hil-suites: collect the suites shipped with the package, as if their directory had
    been given on the command line (before collection arguments are resolved)."""
    if "--hil-suites" in args:
        from harness.config.paths import SUITES_DIR

        known = early_config.known_args_namespace.file_or_dir
        extra = [] if known else ["."]  # keep the user's own tests, which a path would replace
        extra.append(str(SUITES_DIR))
        args.extend(extra)
        known.extend(extra)  # what the initial conftests are looked up from


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: give each worker this session's id."""
    node.workerinput["hil_session_id"] = node.config.stash[SESSION].options.session_id


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hil: a test that runs scenarios on a device or simulator")
    config.addinivalue_line("markers", "hil_cost(seconds, adb=seconds): rough seconds the test "
                            "takes on the reference 2-core host on the simulator (and on an adb "
                            "device, where it differs; unmarked: short); orders a pytest-xdist run "
                            "so each worker's share costs about the same (harness/xdist_order.py)")
    config.addinivalue_line("markers", "hil_programs(*names, precisions=('fp16',), options={}, "
                            "needs=()): the built-in models a suite test runs on by default "
                            "(with --pte: the user's programs), and what it needs of a program")
    # Imported here, not above: pytest rewrites the asserts of a plugin module it imports
    # first (pytest_plugins), and warns when it was imported before.
    from harness.plugin.options import check_start_up, xdist_workers

    try:
        opts = Options.from_config(config)
        session = HilSession(opts, config)
        check_start_up(config, session)
    except HarnessError as exc:
        # Bad input stops the session once, at start-up, with the line to act on.
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION] = session
    _handle_sigterm(config)
    if config.stash[SESSION].uses_farm:
        config.pluginmanager.register(_FarmReports(config.stash[SESSION]), "hil-farm-reports")
    config.stash[REPORTS] = {}
    config.stash[MET] = {}
    config.pluginmanager.register(_KnownIssuesMet(config), "hil-known-issues-met")
    workers = xdist_workers(config, opts)
    if workers > 1:
        kind = session_kinds(opts)[0].name
        config.pluginmanager.register(_XdistBalance(workers, kind), "hil-xdist-balance")
    if not opts.worker.startswith("gw"):
        _link_latest(opts.artifacts_dir)


def _link_latest(artifacts: Path) -> None:
    """DIR/latest -> this session's directory (best effort: a convenience, not a contract)."""
    link = artifacts.parent / "latest"
    try:
        artifacts.mkdir(parents=True, exist_ok=True)
        tmp = artifacts.parent / f".latest-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(artifacts.name)
        os.replace(tmp, link)
    except OSError:
        pass


def _handle_sigterm(config: pytest.Config) -> None:
    """SIGTERM (how CI cancels a job) ends the run as Ctrl-C does: pytest's interrupt path, so
    the session closes (runners killed, the lease released, the workspace removed or kept as
    asked). Only where nobody else handles it (a handler of the user's stays)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it outright
        raise KeyboardInterrupt("SIGTERM")

    config.stash[SIGTERM] = signal.signal(signal.SIGTERM, interrupt)


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(SIGTERM, None)
    if previous is not None:
        import signal

        signal.signal(signal.SIGTERM, previous)
    from harness import runtime

    if PREFIX_ENV in config.stash:  # a session in this process (pytester) leaves it as it was
        before = config.stash[PREFIX_ENV]
        if before is None:
            os.environ.pop(runtime.PREFIX_ENV, None)
        else:
            os.environ[runtime.PREFIX_ENV] = before
    session = config.stash.get(SESSION, None)
    if session is not None:
        try:
            session.close()  # first: on a labgrid farm, the summary then says it was released
        finally:
            lines = session.summary()
            if lines:  # also for xdist workers, whose terminal summary nobody sees
                out = session.options.artifacts_dir / f"session-{session.options.worker}.txt"
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text("\n".join(lines + session.notices) + "\n")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests of known issues as strict xfails (before -k/-m deselection, so an entry
    counts as matched whatever subset runs)."""
    _skip_builtin_only_suites(config, items)
    if config.getoption("ignore_known_issues"):
        return
    issues = config.stash.get(ISSUES, [])
    version = executorch_version()
    qairt = config.stash[SESSION].qairt
    config.stash[FILES] = {item.path for item in items}
    config.stash[PATTERNS] = set()
    for item in items:
        if "hil_device" not in getattr(item, "fixturenames", ()):
            continue
        name = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
        issue = issue_for(item.path, name, version, issues, qairt)
        if issue is not None:
            patterns = config.stash[PATTERNS]
            patterns.update((issue.id, p) for p in issue.matching_patterns(item.path, name))
            item.stash[ISSUE] = issue
            # An intermittent issue's test passes in a run that did not meet it (XPASS).
            item.add_marker(pytest.mark.xfail(raises=AssertionError,
                strict=not issue.intermittent,
                reason=f"known {'intermittent ' if issue.intermittent else ''}issue {issue.id} "
                       f"on executorch {version}: {issue.reason.split('. ')[0]}"))
    stale = unmatched_issues(config)
    if stale and config.getoption("strict_known_issues"):
        raise pytest.UsageError(
            "--strict-known-issues: known issues for executorch " + version + " that match no "
            "collected test (stale or misspelt entries):\n  " + "\n  ".join(
                f"{i.id} in {i.source}: tests {', '.join(i.tests)}" for i in stale))


class _XdistBalance:
    """Under pytest-xdist, arranges the selected tests (after -k/-m deselection, hence last) so
    each worker's share of xdist's work-stealing split costs about the same
    (harness/xdist_order.py). Without xdist the order is kept. Every worker arranges its own
    collection the same way, as xdist requires."""

    def __init__(self, workers: int, kind: str = "simulator") -> None:
        self.workers = workers
        # The run's device kind: its own costs (`hil_cost(1.5, adb=2.4)`) where marked, else
        # the first (the simulator's).
        self.kind = kind

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        def cost(item: pytest.Item) -> float | None:
            marker = item.get_closest_marker("hil_cost")
            if not marker or not marker.args:
                return None
            return float(marker.kwargs.get(self.kind, marker.args[0]))

        items[:] = balanced_order(items, [cost(i) for i in items], self.workers)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`-n N` (xdist's `--dist load`) runs with xdist's work-stealing scheduler: an idle worker
    takes half of the longest queue's tail, and the tests are ordered for its split. Other
    `--dist` modes are xdist's own."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)


def _skip_builtin_only_suites(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --pte, the shipped suites' tests that are bound to built-in models (not
    parametrized by hil_program) are skipped with the reason; a user's own tests are not."""
    if not config.stash[SESSION].options.ptes:
        return
    from harness.config.paths import SUITES_DIR

    suites = SUITES_DIR.resolve()
    reason = ("runs on the built-in models only; with --pte the suites that take a program run "
              "on yours")
    for item in items:
        if ("hil_device" in getattr(item, "fixturenames", ()) and
                "hil_program" not in item.fixturenames and
                Path(item.path).resolve().is_relative_to(suites)):
            item.add_marker(pytest.mark.skip(reason=reason))


def unmatched_issues(config: pytest.Config) -> list[KnownIssue]:
    """Entries for this ExecuTorch version with a test pattern that no collected test matched,
    among patterns whose test file this run collected or that name no existing file at all (a
    misspelt path). A pattern for a suite the run did not select is not stale."""
    version = executorch_version()
    session = config.stash.get(SESSION, None)
    qairt = session.qairt if session is not None else None
    matched = config.stash.get(PATTERNS, set())
    collected = {Path(f).resolve() for f in config.stash.get(FILES, set())}
    stale = []
    for issue in config.stash.get(ISSUES, []):
        if not issue.applies_to(version, qairt):
            continue
        for pattern in issue.tests:
            if (issue.id, pattern) in matched:
                continue
            files = {f.resolve() for f in issue.base.glob(pattern.split("::")[0])}
            if not files and issue.source == DEFAULT_PATH and not IN_CHECKOUT:
                continue  # the project's entry for a test that does not ship in the wheel
            if not files or files & collected:
                stale.append(issue)
                break
    return stale


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash[SESSION]
    opts = session.options
    target = ", ".join(kind_for(t).describe(t) for t in session_targets(opts))
    if session.uses_farm:
        target = (f"a labgrid place with {' '.join(f'{k}={v}' for k, v in opts.lg_place_tags.items())}"
                  f" (coordinator {opts.lg_coordinator}) per worker")
    return [f"hil: target {target}; executorch {executorch_version()}; runner {opts.runner}; "
            f"artifacts {opts.artifacts_dir}", f"hil: runtime {session.runtime_line()}"]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(SESSION, None)
    lines = session.summary() + session.notices if session is not None else []
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        met = config.stash.get(MET, {})
        if met:
            lines.append("known issues met: " + ", ".join(
                f"{k} ({len(v)} tests)" for k, v in sorted(met.items())))
        stale = unmatched_issues(config)
        if stale:
            lines.append("known issues that matched no collected test: " +
                         ", ".join(f"{i.id} ({i.source.name})" for i in stale))
    if lines:
        terminalreporter.section("hil")
        for line in dict.fromkeys(lines):
            terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a labgrid farm: a phone that dropped off for good during an earlier test is replaced
    by another place's before this test's fixtures are set up."""
    session = item.config.stash.get(SESSION, None)
    if session is not None and session.uses_farm and "hil_device" in item.fixturenames:
        try:
            session.fail_over()
        except HarnessError as exc:
            pytest.fail(f"HIL device unavailable: {exc}", pytrace=False)


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
            self.session.notices.extend(getattr(report, "hil_farm_events", []))
        if report.when == "call" or (report.when == "setup" and not report.passed):
            xfailed = hasattr(report, "wasxfail") and report.skipped
            self.session.record_test(label, report.nodeid, "xfailed" if xfailed else report.outcome)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    hil = item.config.stash.get(SESSION, None)
    if (hil is not None and hil.farm_label is not None and
            "hil_device" in getattr(item, "fixturenames", ())):
        report.hil_device = hil.farm_label  # travels to the xdist controller with the report
        report.hil_farm_events = hil.new_farm_events()
    issue = item.stash.get(ISSUE, None)
    if issue is not None and report.when == "call":
        report.hil_known_issue = issue.id  # travels to the xdist controller with the report
    if issue is not None and hasattr(report, "wasxfail") and call.excinfo:
        problem = _not_this_issue(item, issue, call.excinfo.value)
        if problem:
            # Failed, but not only the way the known issue fails: a new bug, not this one.
            del report.wasxfail
            report.outcome = "failed"
            report.longrepr = f"{problem}\n\nthe test's failure:\n{call.excinfo.value}"
    if report.when == "call" and call.excinfo and (report.failed or hasattr(report, "wasxfail")):
        _add_replay_command(report, _replay_command(item, call.excinfo.value))
    item.config.stash[REPORTS].setdefault(item.nodeid, []).append(report)
    return report


def _add_replay_command(report: pytest.TestReport, command: str) -> None:
    """End a failure's message (or an xfail's reason) with the replay command."""
    if not command:
        return
    if hasattr(report, "wasxfail"):
        report.wasxfail = f"{report.wasxfail}; replay: {command}"
    elif isinstance(report.longrepr, str):
        report.longrepr = f"{report.longrepr}\n\nreplay: {command}"
    elif hasattr(report.longrepr, "addsection"):  # keeps the traceback and its crash line
        report.longrepr.addsection("replay", f"replay: {command}")


def _replay_command(item: pytest.Item, exc: BaseException) -> str:
    """`python -m harness replay ...` for the run a failed HIL test failed on: the run its
    failure names, else its last run with a failure, else its last run ("" without runs)."""
    from harness.replay import command_line

    driver = getattr(item, "funcargs", {}).get("scenario_driver")
    results = [r for r in getattr(driver, "results", []) if r.artifacts is not None]
    if not results:
        return ""
    named = failure_of(exc).scenario
    chosen = ([r for r in results if r.scenario.name == named] or
              [r for r in results if run_failures(r)] or results)[-1]
    return command_line(chosen.artifacts, driver.device.replay_args())


class _KnownIssuesMet:
    """Counts a known issue as met by the tests that ran and failed as it says (XFAIL), not by
    every collected test it applies to: a `-k` selection or a skip meets nothing. (Under xdist
    the workers' reports arrive here in the controller, which prints the line.)"""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        issue = getattr(report, "hil_known_issue", None)
        if issue and report.when == "call" and hasattr(report, "wasxfail") and report.skipped:
            self.config.stash[MET].setdefault(issue, []).append(report.nodeid)


def _not_this_issue(item: pytest.Item, issue: KnownIssue, exc: BaseException) -> str:
    """Why this failure is not (only) `issue`, or "" when every failure of the run is it."""
    driver = getattr(item, "funcargs", {}).get("scenario_driver")
    failures = [f for r in getattr(driver, "results", []) for f in run_failures(r)]
    raised = failure_of(exc)
    if raised.kind == "check" or not failures:
        failures.append(raised)
    missed = uncovered(issue, failures)
    if not missed:
        return ""
    lines = [f"known issue {issue.describe()} does not cover every failure of this run:"]
    for f in failures:
        mark = "not covered" if f in missed else "covered    "
        lines.append(f"  {mark} {f.describe()}")
    first = missed[0]
    lines.append(f"first failure not covered ({first.kind}):\n    " +
                 "\n    ".join(first.message.strip().splitlines()[:15]))
    return "\n".join(lines)


@pytest.fixture(scope="session")
def hil_session(pytestconfig: pytest.Config) -> HilSession:
    """The session's state: options, the QNN SDK, runners, compiled models and the device
    (built on first use). One per pytest process (per xdist worker)."""
    return pytestconfig.stash[SESSION]


@pytest.fixture(scope="session")
def hil_device(hil_session: HilSession, pytestconfig: pytest.Config):
    """The device scenarios run on (the HTP simulator, or the --device / farm phone), set up
    and preflighted once per session; a device that cannot be used fails every test that takes
    it with the same one-line reason."""
    try:
        device = hil_session.device
    except HarnessError as exc:
        unavailable = str(exc)  # failed outside the handler: one message, not two chained
    else:
        unavailable = ""
    if unavailable:
        pytest.fail(f"HIL device unavailable: {unavailable}", pytrace=False)
    problems = device.preflight()
    if problems:
        pytest.fail(f"preflight of {device.info.serial} failed:\n  " + "\n  ".join(problems),
                    pytrace=False)
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in hil_session.header():
            reporter.write_line(f"hil: {line}")
    return device


@pytest.fixture(scope="session")
def compiled_model(hil_session: HilSession, hil_device) -> Callable[..., CompiledModel]:
    """`compiled_model(name, precision="fp16", **qnn_options)`: a built-in model (or one from
    --models-dir) compiled for the device's SoC, cached by source and options; skips, with the
    reason, when the device's runtime lacks a backend the model needs."""
    def factory(name: str, precision: str = "fp16", **options: bool) -> CompiledModel:
        """`options`: QNN compile options, e.g. multi_contexts=True, spill_fill=True."""
        try:
            model = hil_session.model(name, precision, options or None)
        except HarnessError as exc:
            pytest.fail(str(exc), pytrace=False)
        skip_without_backend(hil_device, model)
        return model
    return factory


def skip_without_backend(device, model: CompiledModel) -> None:
    """Skip, saying so, when the device's runtime lacks a backend the model's delegates need."""
    backends = getattr(device, "backends", None)
    if backends is None:
        return
    needed = {"qnn": "QnnBackend", "xnnpack": "XnnpackBackend"}
    missing = [needed[b] for b in model.backend.split("+") if b in needed and needed[b] not in backends]
    if missing:
        pytest.skip(f"device {device.info.serial}'s runtime has no {', '.join(missing)} (it "
                    f"registers {', '.join(backends) or 'none'}): {model.name} needs it")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "hil_program" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker(MARKER)
    if mark is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a test that takes hil_program "
                                f"needs @pytest.mark.{MARKER}(<built-in model>, needs=...)")
    params = params_for(mark, metafunc.config.stash[SESSION].options.ptes)
    metafunc.parametrize("hil_program", params, ids=unique_ids(params), indirect=True)


@pytest.fixture
def hil_program(request: pytest.FixtureRequest, hil_session: HilSession, hil_device) -> CompiledModel:
    """The program this test runs on: a built-in model build, or with --pte the user's
    program (with inputs and a reference from its solo run). Skips, with the reason, when the
    program lacks what the test's hil_programs marker needs."""
    param = request.param
    try:
        if param.pte is not None:
            model = hil_session.program(param.pte)
        else:
            model = hil_session.model(param.name, param.precision, dict(param.options) or None)
    except HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    skip_without_backend(hil_device, model)
    reason = unmet_needs(model, param.needs)
    if reason:
        pytest.skip(f"{reason}: {request.node.originalname} needs it")
    return model


@pytest.fixture(scope="session")
def hil_pte(hil_session: HilSession, hil_device) -> Callable[[str | Path], CompiledModel]:
    """`hil_pte(path)`: a program file of your own as a model for scenarios: its methods and
    inputs read from it, its reference outputs from a solo run on the session's device, and
    refused if it was compiled for another SoC than the device's."""
    def factory(path: str | Path) -> CompiledModel:
        from harness.programs.pte import check_file

        try:
            check_file(Path(path))
            return hil_session.program(Path(path))
        except HarnessError as exc:
            pytest.fail(str(exc), pytrace=False)
    return factory


@pytest.fixture
def scenario_driver(request: pytest.FixtureRequest, hil_session: HilSession, hil_device):
    """Runs scenarios on the session's device, each in a fresh runner process, with this
    test's artifacts directory (kept when the test fails or with --keep-artifacts)."""
    artifacts = hil_session.options.artifacts_dir / _safe(request.node.nodeid)
    if artifacts.exists():
        shutil.rmtree(artifacts)
    driver = ScenarioDriver(hil_device, artifacts, hil_session.timeout, defer_artifacts=True)
    yield driver
    reports = request.config.stash[REPORTS].get(request.node.nodeid, [])
    passed = reports and all(r.passed for r in reports) and not any(
        hasattr(r, "wasxfail") for r in reports)
    if passed and not hil_session.options.keep_artifacts:
        if artifacts.exists():
            shutil.rmtree(artifacts)
    else:
        driver.write_artifacts()
        driver.record_checks()


def _safe(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:200]


def __getattr__(name: str):
    """session_id and xdist_workers from harness/plugin/options.py, on first use."""
    if name in ("session_id", "xdist_workers"):
        from harness.plugin import options

        return getattr(options, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
