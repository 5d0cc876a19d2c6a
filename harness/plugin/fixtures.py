"""The fixtures test authors use: the session, its device, models and programs compiled for
it, and the scenario driver whose artifacts are kept when the test fails. The reports each
test made so far are kept here for the driver's decision (`REPORTS`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable

import pytest

from harness.errors import HarnessError
from harness.plugin.keys import DRIVER, REPORTS, SESSION
from harness.programs.compile import CompiledModel
from harness.programs.params import unmet_needs
from harness.drive.driver import ScenarioDriver
from harness.session import HilSession


def pytest_configure(config: pytest.Config) -> None:
    config.stash[REPORTS] = {}


@pytest.fixture(scope="session", autouse=True)
def stress_load(pytestconfig: pytest.Config):
    """`--stress-load N`: N busy processes beside the session, stopped at its end (by their
    own pids: only the processes this fixture started)."""
    n = pytestconfig.getoption("--stress-load", 0) or 0
    if n < 0:
        raise pytest.UsageError(f"--stress-load {n}: give a number of CPU hogs, 0 or more")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            for _ in range(n)]
    try:
        yield len(hogs)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """The outermost of the plugin's makereport wrappers (this module registers after the
    others that have one): the report is kept as they left it."""
    report = yield
    item.config.stash[REPORTS].setdefault(item.nodeid, []).append(report)
    return report


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
            error = str(exc)
        else:
            skip_without_backend(hil_device, model)
            return model
        # outside the handler: the message once, not again as "During handling of the above"
        pytest.fail(error, pytrace=False)
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


@pytest.fixture
def hil_program(request: pytest.FixtureRequest, hil_session: HilSession, hil_device) -> CompiledModel:
    """The program this test runs on: a built-in model build, or with --pte the user's
    program (with inputs and a reference from its solo run). Skips, with the reason, when the
    program lacks what the test's hil_programs marker needs."""
    param = request.param
    error = ""
    try:
        if param.pte is not None:
            model = hil_session.program(param.pte)
        else:
            model = hil_session.model(param.name, param.precision, dict(param.options) or None)
    except HarnessError as exc:
        error = str(exc)
    if error:  # outside the handler: the message once (see compiled_model)
        pytest.fail(error, pytrace=False)
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
    request.node.stash[DRIVER] = driver
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
