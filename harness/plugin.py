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

import re
import shutil
from pathlib import Path
from typing import Callable

import pytest

from harness.compile import CompiledModel
from harness.config import load_farm
from harness.driver import ScenarioDriver
from harness.errors import HarnessError
from harness.known_issues import DEFAULT_PATH, KnownIssue, issue_for, load_known_issues
from harness.qnn.sdk import executorch_version
from harness.session import HilSession, Options, worker_info

_SESSION_KEY = pytest.StashKey[HilSession]()
_REPORTS_KEY = pytest.StashKey[dict]()
_ISSUE_KEY = pytest.StashKey[KnownIssue]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil", "ExecuTorch QNN hardware-in-the-loop")
    group.addoption("--device", action="append", default=[], metavar="SERIAL",
                    help="Android device serial (USB id or host:port); repeat for several "
                         "devices, one per pytest-xdist worker. Default: the HTP simulator.")
    group.addoption("--simulator", action="store_true",
                    help="run on the host HTP simulator (the default when no --device is given)")
    group.addoption("--soc", default=None,
                    help="SoC to compile for on the simulator (default from "
                         "device_configs/simulator.yaml: SM8650); devices report their own")
    group.addoption("--device-config", type=Path, default=None, metavar="YAML",
                    help="a SoC config file to use instead of device_configs/socs/<SOC>.yaml")
    group.addoption("--artifacts-dir", type=Path, default=Path(".hil-artifacts"),
                    help="where per-test traces, events and logs go (kept for failures)")
    group.addoption("--keep-artifacts", action="store_true",
                    help="keep artifacts of passing tests too")
    group.addoption("--ignore-known-issues", action="store_true",
                    help="run known-issue tests as plain tests instead of strict xfails")
    group.addoption("--known-issues", type=Path, default=DEFAULT_PATH, metavar="YAML",
                    help="known-issues file (default device_configs/known_issues.yaml)")
    group.addoption("--runner", choices=("auto", "native", "python"), default="auto",
                    help="lifecycle runner: native (built on first use) or python; auto picks "
                         "native when it can be built")
    group.addoption("--runner-timeout", type=float, default=None, metavar="SECONDS",
                    help="kill a runner after this long (default from the device config)")
    group.addoption("--qnn-abi-bridge", choices=("auto", "on", "off"), default="auto",
                    help="re-lay QNN HTP device custom configs for newer QAIRT libraries "
                         "(auto: decided from the API version the library reports)")
    group.addoption("--adb-server", default=None, metavar="HOST:PORT",
                    help="adb server to use (default: ANDROID_ADB_SERVER_ADDRESS/PORT or "
                         "127.0.0.1:5037)")
    group.addoption("--farm", type=Path, default=None, metavar="YAML",
                    help="a device farm file (device_configs/farms/): its devices and adb server; "
                         "use with -n <number of devices>")
    group.addoption("--keep-workspace", action="store_true",
                    help="leave the on-device workspace in place at the end of the session")
    group.addoption("--device-workspace", default=None, metavar="PATH",
                    help="on-device workspace directory (default: a new one per session and "
                         "worker under /data/local/tmp); reuse one to skip pushes across runs")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hil: a test that runs scenarios on a device or simulator")
    worker, count = worker_info()
    devices, adb_server, device_socs = list(config.getoption("device")), config.getoption("adb_server"), {}
    farm = config.getoption("farm")
    if farm is not None:
        try:
            farm_server, entries = load_farm(farm)
        except HarnessError as exc:
            raise pytest.UsageError(str(exc)) from None
        devices = devices or [e["serial"] for e in entries]
        adb_server = adb_server or farm_server
        device_socs = {e["serial"]: e["soc"] for e in entries if "soc" in e}
    opts = Options(
        devices=devices, simulator=config.getoption("simulator"),
        soc=config.getoption("soc"), device_config=config.getoption("device_config"),
        artifacts_dir=Path(config.getoption("artifacts_dir")).resolve(),
        keep_artifacts=config.getoption("keep_artifacts"), runner=config.getoption("runner"),
        runner_timeout=config.getoption("runner_timeout"),
        abi_bridge=config.getoption("qnn_abi_bridge"), adb_server=adb_server,
        device_socs=device_socs,
        keep_workspace=config.getoption("keep_workspace"),
        device_workspace=config.getoption("device_workspace"), worker=worker, worker_count=count)
    config.stash[_SESSION_KEY] = HilSession(opts)
    config.stash[_REPORTS_KEY] = {}


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        lines = session.summary()
        if lines:  # also for xdist workers, whose terminal summary nobody sees
            out = session.options.artifacts_dir / f"session-{session.options.worker}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("\n".join(lines + session.notices) + "\n")
        session.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("ignore_known_issues"):
        return
    hil_items = [i for i in items if "hil_device" in getattr(i, "fixturenames", ())]
    if not hil_items:
        return
    try:
        issues = load_known_issues(config.getoption("known_issues"))
    except HarnessError as exc:
        raise pytest.UsageError(str(exc)) from None
    version = executorch_version()
    for item in hil_items:
        issue = issue_for(item.nodeid, version, issues)
        if issue is not None:
            item.stash[_ISSUE_KEY] = issue
            item.add_marker(pytest.mark.xfail(raises=AssertionError,
                strict=True, reason=f"known issue {issue.id} on executorch {version}: "
                       f"{issue.reason.split('. ')[0]}"))


def pytest_report_header(config: pytest.Config) -> list[str]:
    session = config.stash[_SESSION_KEY]
    opts = session.options
    target = ", ".join(opts.devices) if opts.devices and not opts.simulator else "HTP simulator"
    return [f"hil: target {target}; executorch {executorch_version()}; runner {opts.runner}; "
            f"artifacts {opts.artifacts_dir}"]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    lines = session.summary() + session.notices if session is not None else []
    if lines:
        terminalreporter.section("hil")
        for line in dict.fromkeys(lines):
            terminalreporter.write_line(line)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    issue = item.stash.get(_ISSUE_KEY, None)
    if issue is not None and issue.match and hasattr(report, "wasxfail") and call.excinfo:
        text = str(call.excinfo.value)
        if not re.search(issue.match, text):
            # Failed, but not the way the known issue fails: that is a new bug, not this one.
            del report.wasxfail
            report.outcome = "failed"
            report.longrepr = (f"known issue {issue.id} expects a failure matching "
                               f"{issue.match!r}; this failure does not match:\n{text}")
    item.config.stash[_REPORTS_KEY].setdefault(item.nodeid, []).append(report)
    return report


@pytest.fixture(scope="session")
def hil_session(pytestconfig: pytest.Config) -> HilSession:
    return pytestconfig.stash[_SESSION_KEY]


@pytest.fixture(scope="session")
def hil_device(hil_session: HilSession, pytestconfig: pytest.Config):
    try:
        device = hil_session.device
    except HarnessError as exc:
        pytest.fail(f"HIL device unavailable: {exc}", pytrace=False)
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
    def factory(name: str, precision: str = "fp16", **options: bool) -> CompiledModel:
        """`options`: QNN compile options, e.g. multi_contexts=True, spill_fill=True."""
        try:
            return hil_session.model(name, precision, options or None)
        except HarnessError as exc:
            pytest.fail(str(exc), pytrace=False)
    return factory


@pytest.fixture
def scenario_driver(request: pytest.FixtureRequest, hil_session: HilSession, hil_device):
    artifacts = hil_session.options.artifacts_dir / _safe(request.node.nodeid)
    if artifacts.exists():
        shutil.rmtree(artifacts)
    driver = ScenarioDriver(hil_device, artifacts, hil_session.timeout, hil_session.runner_kind)
    yield driver
    reports = request.config.stash[_REPORTS_KEY].get(request.node.nodeid, [])
    passed = reports and all(r.passed for r in reports) and not any(
        hasattr(r, "wasxfail") for r in reports)
    if passed and not hil_session.options.keep_artifacts and artifacts.exists():
        shutil.rmtree(artifacts)


def _safe(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:200]
