"""Reports people look at: JUnit properties, and `--hil-report DIR` (HTML page + results.json).

Always, for every HIL test, the JUnit XML gets per-test properties through pytest's
`record_property` mechanism (`item.user_properties`; they reach the XML with
`junit_family = "xunit1"`, set in pyproject.toml): the known issue, the device, live QNN counts
after the last scenario's last step, peak Rss/Pss/Anonymous/dma-buf over the test's scenario
runs, per method the load and execute milliseconds (median and max), and XNNPACK placement
verdicts; and session facts through `record_testsuite_property` (device serial, kind and SoC,
runner, executorch, the QNN libraries and QAIRT version, the QNN API versions).

With `--hil-report DIR`:

- `DIR/report.html`: one self-contained pytest-html page; each HIL test's row carries a step
  table per scenario run, a matplotlib plot of memory and live contexts over the steps with
  the failing step shaded, the runtime's log lines and the QNN calls of that step; the summary
  shows each device (identity, SoC config, and on phones governors, thermal zones and battery
  at the start and end of the session) and the known issues met and unmatched;
- `DIR/results.json`: every scenario run and every test outcome, schema
  `executorch-hil-results/1` (docs/results-schema.md), which `python -m harness compare` reads.

Works under pytest-xdist: workers attach each test's data to its reports (pytest ships report
attributes to the controller) and their device facts to `workeroutput`; the controller writes.
"""

from __future__ import annotations

import json
import os
import platform
import time
from typing import Any
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.log import FULL, disk_full_tolerated
from harness.results.failures import failure_of, run_failures
from harness.plugin.keys import DRIVER, ISSUE, SESSION, is_hil
from harness.plugin.known_issues import unmatched_issues
from harness.report.claim import REDIRECT_ENV, claim
from harness.qnn.sdk import built_against_core_api
from harness.runtime import executorch_version
from harness.runtime import qairt_version
from harness.results import (SCHEMA, failure_entry, junit_properties, qnn_api, run_entry,
                             metrics_of, xnnpack_entry)

_STATE_KEY = pytest.StashKey["HilReport"]()
_VERDICTS_KEY = pytest.StashKey[list]()
_STORIES_KEY = pytest.StashKey[list]()
RESULTS_NAME = "results.json"
DEFAULT_MAX_RUNS = 100
PAGE_NAME = "report.html"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hil", "ExecuTorch QNN hardware-in-the-loop")
    group.addoption("--hil-report", default=None, metavar="DIR",
                    help=f"write DIR/{PAGE_NAME} (one self-contained page: per test the steps, "
                         "memory and live-context plots, log and trace excerpts; per device "
                         f"its identity and state) and DIR/{RESULTS_NAME} (scenario runs and "
                         "test outcomes, schema executorch-hil-results/1) for "
                         "`python -m harness compare`")
    group.addoption("--hil-report-max-runs", type=int, default=DEFAULT_MAX_RUNS, metavar="N",
                    help=f"keep at most N scenario runs without failures per test in "
                         f"{RESULTS_NAME} (default {DEFAULT_MAX_RUNS}; 0 keeps all): ordering "
                         "explorers run thousands; runs with failures are always kept, and a "
                         "test's metrics cover all its runs")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before pytest-html's own pytest_configure: point it at DIR/report.html, self-contained."""
    directory = config.getoption("hil_report", None)
    report_dir = Path(directory).resolve() if directory else None
    notice = ""
    if report_dir is not None:
        if not config.pluginmanager.hasplugin("html") or not hasattr(config.option, "htmlpath"):
            raise pytest.UsageError("--hil-report needs the pytest-html plugin (pip install "
                                    "'pytest-html>=4.1,<5'; it is disabled with -p no:html)")
        if hasattr(config, "workerinput"):  # the controller's choice (claim.REDIRECT_ENV)
            report_dir = Path(os.environ.get(REDIRECT_ENV) or report_dir)
        else:
            try:
                report_dir, notice = claim(report_dir)
            except OSError as exc:
                if exc.errno not in FULL:
                    raise pytest.UsageError(f"--hil-report {report_dir}: cannot write there: "
                                            f"{exc.strerror or exc}") from None
                # a full disk: the session runs unclaimed, and its report's writes say it once
                # (disk_full_tolerated) with the verdicts kept
            os.environ[REDIRECT_ENV] = str(report_dir)
        if not config.option.htmlpath:
            config.option.htmlpath = str(report_dir / PAGE_NAME)
            config.option.self_contained_html = True
        if notice:
            config.issue_config_time_warning(pytest.PytestConfigWarning(notice), stacklevel=2)
    plugin = HilReport(config, report_dir)
    plugin.notice = notice
    config.stash[_STATE_KEY] = plugin
    config.pluginmanager.register(plugin, "executorch_hil_report")
    config.pluginmanager.register(_FullDiskAtFinish(), "executorch_hil_full_disk")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        os.environ.pop(REDIRECT_ENV, None)


def report_directory(config: pytest.Config) -> Path | None:
    """Where this session's --hil-report goes: DIR, or beside it when a live session had it."""
    plugin = config.stash.get(_STATE_KEY, None)
    return plugin.directory if plugin is not None else None


class _FullDiskAtFinish:
    """Around every plugin's session finish (pytest-html's report.html, the JUnit XML,
    results.json): a full disk there is one notice naming the directory, not a traceback that
    ends the session after its verdicts were made."""

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session):
        try:
            return (yield)
        except OSError as exc:
            report = session.config.getoption("hil_report", None)
            hil = session.config.stash.get(SESSION, None)
            directory = (Path(str(exc.filename)).parent if exc.filename else
                         Path(report) if report else
                         hil.options.artifacts_dir if hil is not None else Path.cwd())
            with disk_full_tolerated(directory, "the session's reports"):
                raise
            return None


@pytest.fixture(autouse=True)
def _hil_suite_properties(request: pytest.FixtureRequest, record_testsuite_property):
    """Session facts into the JUnit XML, once each, as soon as a HIL test has made them known
    (after its device is up and, for the QNN API version, after its first scenario run)."""
    yield
    plugin = request.config.stash.get(_STATE_KEY, None)
    if plugin is not None and plugin.facts is not None:
        for name, value in plugin.suite_properties():
            if name not in plugin.recorded_suite:
                plugin.recorded_suite.add(name)
                record_testsuite_property(name, value)


class HilReport:
    def __init__(self, config: pytest.Config, directory: Path | None) -> None:
        self.config = config
        self.directory = directory
        # Test data is gathered only for a consumer: the JUnit XML or the report.
        self.active = directory is not None or bool(getattr(config.option, "xmlpath", None))
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "master")
        self.device = None  # this process's device, once a HIL test set it up
        self.facts: dict | None = None  # its identity, config, versions and state
        self.recorded_suite: set[str] = set()
        self.phases: dict[str, dict[str, pytest.TestReport]] = {}  # nodeid -> when -> report
        self.order: list[str] = []
        self.devices: dict[str, dict] = {}  # worker -> device facts (controller)
        self.issues: dict[str, dict] = {}  # known issue id -> what it is
        self.unmatched: dict[str, dict] = {}
        self.started = time.time()
        self.notice = ""  # where the report went instead of --hil-report's DIR, and why

    # This process's device ------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        result = yield
        if fixturedef.argname == "hil_device" and self.device is None:
            self.device = result
            self.facts = self._device_facts(result)
            if self.directory is not None:
                self.facts["state"]["start"] = result.read_state()
        return result

    def _device_facts(self, device) -> dict:
        session = self.config.stash[SESSION]
        info = device.info
        facts = {"worker": self.worker, "serial": info.serial, "kind": info.kind, "soc": info.soc,
                 "abi": info.abi, "android": info.android,
                 "details": {k: v for k, v in info.details.items()}, "runner": None,
                 "soc_config": None, "simulator_config": None, "qnn": {}, "state": {},
                 "dsp_heap": device.dsp_heap_note}
        try:
            facts["runner"] = session.device_runner
        except HarnessError as exc:
            facts["runner"] = f"unavailable: {exc}"
        try:
            soc = session.soc_config
            facts["soc_config"] = {"soc": soc.soc, "name": soc.name, "htp_arch": soc.htp_arch,
                                   "vtcm_mb": soc.vtcm_mb, "rss_leak_kb": soc.rss_leak_kb,
                                   "htp_context_kb": soc.htp_context_kb,
                                   "dsp_heap_context_kb": soc.dsp_heap_context_kb,
                                   "dsp_heap_leak_kb": soc.dsp_heap_leak_kb,
                                   "runner_timeout_s": soc.runner_timeout_s,
                                   "board_platforms": list(soc.board_platforms),
                                   "file": str(soc.path)}
        except HarnessError as exc:
            facts["soc_config"] = {"error": str(exc)}
        facts.update(device.report_facts())  # the kind's own (the simulator's config)
        facts["qnn"] = qnn_versions(session)
        return facts

    def suite_properties(self) -> list[tuple[str, str]]:
        f = self.facts or {}
        qnn = f.get("qnn") or {}
        props = [("hil.device", f.get("serial")), ("hil.device_kind", f.get("kind")),
                 ("hil.soc", f.get("soc")), ("hil.abi", f.get("abi")),
                 ("hil.android", f.get("android")), ("hil.runner", f.get("runner")),
                 ("hil.executorch", executorch_version()),
                 *((f"hil.executorch_{k}", v) for k, v in runtime_facts().items()
                   if k not in ("version",)),
                 ("hil.qnn_libraries", qnn.get("libraries")), ("hil.qairt", qnn.get("qairt")),
                 ("hil.qnn_core_api_built_against", qnn.get("core_api_built_against")),
                 ("hil.qnn_core_api", qnn.get("core_api")),
                 ("hil.qnn_backend_api", qnn.get("backend_api"))]
        return [(k, str(v)) for k, v in props if v not in (None, "")]

    # Per test --------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        if not (self.active and is_hil(item)):
            return (yield)
        # Only for a report: the XNNPACK cache's verdicts and launch stories (their log
        # patterns are most of harness.results.xnnpack's import).
        from harness.results.xnnpack import collect_verdicts
        from harness.results.xnnpack_launches import collect_stories

        with collect_verdicts() as verdicts, collect_stories() as stories:
            try:
                return (yield)
            finally:
                item.stash[_VERDICTS_KEY] = list(verdicts)
                item.stash[_STORIES_KEY] = list(stories)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        data = None
        if self.active and is_hil(item):
            data = self._test_data(item, call)
            if call.when == "setup":
                item.user_properties.extend(junit_properties(
                    {"known_issue": data["known_issue"], "device": data["device"]}))
            elif call.when == "call":
                item.user_properties.extend(
                    p for p in junit_properties(data) if p[0] not in ("hil.known_issue", "hil.device"))
        report = yield
        if data is not None:
            results = data.pop("_results", [])
            raised = data.pop("_raised", None)
            report.hil = data  # shipped to the xdist controller with the report
            if self.directory is not None and call.when == "call":
                from harness.report.html import extras_for_test

                report.extras = list(getattr(report, "extras", [])) + extras_for_test(
                    data, data["runs"], results, raised)
        return report

    def _test_data(self, item: pytest.Item, call: pytest.CallInfo) -> dict:
        issue = item.stash.get(ISSUE, None)
        data = {"known_issue": issue.id if issue else None,
                "device": self.facts["serial"] if self.facts else None, "worker": self.worker}
        if issue is not None and call.when == "setup":
            data["issue"] = {"id": issue.id, "reason": issue.reason, "kinds": list(issue.kinds),
                             "match": issue.match, "source": str(issue.source),
                             "tests": list(issue.tests), "where": issue.where,
                             "bug": issue.is_bug, "reproduce": issue.reproduce,
                             "root": issue.root if issue.is_bug else None}
        if call.when != "call":
            return data
        driver = item.stash.get(DRIVER, None)
        results = list(driver.results) if driver is not None else []
        replay_args = driver.device.replay_args() if driver is not None else None
        verdicts = item.stash.get(_VERDICTS_KEY, [])
        runs: list[dict[str, Any]] = []
        seen: dict[str, int] = {}
        last = {r.scenario.name: i for i, r in enumerate(results)}
        for index, result in enumerate(results):
            name = result.scenario.name
            mine = [xnnpack_entry(load, expected) for load, expected in verdicts
                    if load.scenario == name and last[name] == index]
            runs.append(run_entry(result, run_failures(result), nodeid=item.nodeid, index=index,
                                  occurrence=seen.get(name, 0), device=data["device"],
                                  xnnpack=mine, replay_args=replay_args))
            seen[name] = seen.get(name, 0) + 1
            if self.facts is not None and "core_api" not in self.facts["qnn"]:
                api = qnn_api(result)
                if api:
                    self.facts["qnn"].update({"core_api": api.get("core"),
                                              "backend_api": api.get("backend"),
                                              "provider": api.get("provider")})
        raised = None
        parts: list[dict] = []
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            failure = failure_of(call.excinfo.value)
            raised = failure_entry(failure)
            parts = [failure_entry(f) for f in getattr(call.excinfo.value, "parts", [])]
        metrics = metrics_of(runs)
        kept = kept_runs(runs, self.config.getoption("hil_report_max_runs", DEFAULT_MAX_RUNS),
                         raised)
        omitted = len(runs) - len(kept) + getattr(driver, "omitted", 0)
        data.update({"runs": [runs[i] for i in kept], "runs_omitted": omitted,
                     "metrics": metrics,
                     "xnnpack": [xnnpack_entry(load, expected) for load, expected in verdicts],
                     "xnnpack_launches": [story.to_json()
                                          for story in item.stash.get(_STORIES_KEY, [])],
                     "failure": raised, "failure_parts": parts,
                     "_results": [results[i] for i in kept],
                     "_raised": raised})
        return data

    # Collecting (controller, or the only process) ------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.phases:
            self.phases[report.nodeid] = {}
            self.order.append(report.nodeid)
        self.phases[report.nodeid][report.when] = report
        hil = getattr(report, "hil", None)
        if hil and hil.get("issue"):
            self.issues[hil["issue"]["id"]] = hil["issue"]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        """xdist controller: a worker's device facts and stale known issues."""
        out = getattr(node, "workeroutput", {}).get("hil_report")
        if not out:
            return
        if out.get("device"):
            facts = out["device"]
            self.devices[facts["worker"]] = facts
            self._suite_properties_for_worker(facts)
        for issue in out.get("unmatched", []):
            self.unmatched[issue["id"]] = issue

    def _suite_properties_for_worker(self, facts: dict) -> None:
        """Under xdist the JUnit XML is written by the controller, which has no device fixture:
        each worker's session facts, named hil.<worker>.*."""
        try:
            from _pytest.junitxml import xml_key
        except ImportError:
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is None:
            return
        saved, self.facts = self.facts, facts
        try:
            for name, value in self.suite_properties():
                xml.add_global_property(name.replace("hil.", f"hil.{facts['worker']}.", 1), value)
        finally:
            self.facts = saved

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.device is not None and self.directory is not None and self.facts is not None:
            self.facts["state"]["end"] = self.device.read_state()
        unmatched = [_issue_json(i) for i in _safe_unmatched(self.config)]
        if hasattr(self.config, "workerinput"):
            # pytest-xdist adds workeroutput to a worker's config; pytest's Config does not declare it.
            self.config.workeroutput["hil_report"] = {  # type: ignore[attr-defined]
                "device": self.facts, "unmatched": unmatched}
            return
        if self.facts is not None:
            self.devices[self.facts["worker"]] = self.facts
        for issue in unmatched:
            self.unmatched[issue["id"]] = issue
        if self.directory is not None:
            doc = self.document(int(exitstatus))
            self._doc = doc
            path = self.directory / RESULTS_NAME
            tmp = path.with_suffix(".json.tmp")
            with disk_full_tolerated(self.directory, RESULTS_NAME):
                try:
                    tmp.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
                except OSError:
                    tmp.unlink(missing_ok=True)  # not a half document left behind
                    raise
                os.replace(tmp, path)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if hasattr(self.config, "workerinput"):
            return
        if self.active:
            terminalreporter.write_line(self.bridge_line())
        if self.directory is not None:
            if self.notice:
                terminalreporter.write_line(f"hil report: {self.notice}", yellow=True)
            terminalreporter.write_line(f"hil report: {self.directory / PAGE_NAME} and "
                                        f"{self.directory / RESULTS_NAME}")

    def bridge_line(self) -> str:
        """What the ABI bridge rewrote in this session's runs (harness.qnn.pairing), in one
        line: a library-side failure after a rewrite may be an artifact of the SDK pairing."""
        runs = [run for phases in self.phases.values() for report in phases.values()
                for run in (getattr(report, "hil", None) or {}).get("runs", [])]
        rewritten = [run for run in runs if run.get("abi_bridge")]
        calls = sum(len(run["abi_bridge"]) for run in rewritten)
        layouts = sorted({c.get("union") or "?" for run in rewritten for c in run["abi_bridge"]})
        if not calls:
            return f"hil: ABI bridge: no QNN call rewritten in the {len(runs)} scenario runs kept"
        return (f"hil: ABI bridge: {calls} QnnDevice_create call(s) rewritten (custom device "
                f"configs re-laid, union {', '.join(layouts)}) in {len(rewritten)} of "
                f"{len(runs)} scenario runs kept")

    # The document ------------------------------------------------------------------------------
    def document(self, exitstatus: int) -> dict:
        tests, runs = [], []
        for nodeid in self.order:
            phases = self.phases[nodeid]
            outcome, xpass_strict = outcome_of(phases)
            hil: dict[str, Any] = {}
            for when in ("setup", "call", "teardown"):
                hil.update(getattr(phases.get(when), "hil", None) or {})
            hil.pop("issue", None)
            test_runs = hil.pop("runs", [])
            for run in test_runs:
                run["outcome"] = outcome
                run["known_issue"] = hil.get("known_issue")
            runs.extend(test_runs)
            tests.append({
                "nodeid": nodeid, "outcome": outcome, "xpass_strict": xpass_strict,
                "hil": bool(hil), "known_issue": hil.get("known_issue"),
                "device": hil.get("device"), "worker": hil.get("worker"),
                "duration_s": round(sum(r.duration for r in phases.values()), 3),
                "message": message_of(phases, outcome),
                "failure": hil.get("failure"), "failure_parts": hil.get("failure_parts") or [],
                "metrics": hil.get("metrics"),
                "xnnpack": hil.get("xnnpack") or [],
                "xnnpack_launches": hil.get("xnnpack_launches") or [],
                "scenario_runs": len(test_runs) + hil.get("runs_omitted", 0),
                "runs_omitted": hil.get("runs_omitted", 0)})
        totals: dict[str, int] = {}
        for t in tests:
            totals[t["outcome"]] = totals.get(t["outcome"], 0) + 1
        met: dict[str, dict] = {}
        for t in tests:
            if t["known_issue"]:
                entry = met.setdefault(t["known_issue"], {
                    **{k: v for k, v in self.issues.get(t["known_issue"], {}).items()
                       if k != "id"}, "nodeids": [], "outcomes": {}})
                entry["nodeids"].append(t["nodeid"])
                entry["outcomes"][t["outcome"]] = entry["outcomes"].get(t["outcome"], 0) + 1
        session = self.config.stash.get(SESSION, None)
        return {
            "schema": SCHEMA,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "session_id": session.options.session_id if session else None,
            "artifacts_dir": str(session.options.artifacts_dir) if session else None,
            "exit_status": exitstatus,
            "duration_s": round(time.time() - self.started, 3),
            "args": list(self.config.invocation_params.args),
            "environment": {
                "executorch": executorch_version(),
                "runtime": runtime_facts(),
                "python": platform.python_version(), "platform": platform.platform(),
                "pytest": pytest.__version__,
                "qnn": next((d["qnn"] for d in self.devices.values() if d.get("qnn")), {}),
                "ignore_known_issues": bool(self.config.getoption("ignore_known_issues", False)),
                # every call the ABI bridge rewrote in this session's runs (harness.qnn.pairing)
                "abi_bridge_rewrites": sum(len(r.get("abi_bridge") or []) for r in runs),
            },
            "devices": [self.devices[k] for k in sorted(self.devices)],
            "known_issues": {"met": met, "unmatched": list(self.unmatched.values()),
                             # only runtime and QNN library defects count as bugs found
                             "bugs_found": sorted(k for k, v in met.items() if v.get("bug")),
                             # the distinct defects among them: root -> its entries
                             "defects": _by_root(met),
                             "by_where": _by_where(met)},
            "totals": totals,
            "tests": tests,
            "runs": runs,
        }

    # pytest-html -------------------------------------------------------------------------------
    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(self, prefix, summary, postfix, session) -> None:
        if self.directory is None:
            return
        from harness.report.html import devices_section, headline_section, known_issues_section

        doc = getattr(self, "_doc", None) or self.document(int(session.exitstatus or 0))
        prefix.append(headline_section(doc["devices"], doc["environment"], RESULTS_NAME))
        postfix.append(devices_section(doc["devices"]))
        postfix.append(known_issues_section(doc["known_issues"]["met"],
                                            doc["known_issues"]["unmatched"],
                                            doc["known_issues"]["defects"]))

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_report_title(self, report) -> None:
        if self.directory is not None:
            report.title = f"ExecuTorch QNN HIL report ({runtime_facts()['description']})"

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells) -> None:
        if self.directory is not None:
            cells.insert(2, "<th>Known issue</th>")

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report, cells) -> None:
        if self.directory is not None:
            from html import escape

            issue = (getattr(report, "hil", None) or {}).get("known_issue") or ""
            cells.insert(2, f"<td>{escape(issue)}</td>")


# Helpers ----------------------------------------------------------------------------------------
def kept_runs(runs: list[dict], limit: int, raised: dict | None = None) -> list[int]:
    """Indices of the runs results.json keeps: every run with failures (or that the test's
    own failure names), and the first `limit` others (all when `limit` <= 0)."""
    if limit <= 0 or len(runs) <= limit:
        return list(range(len(runs)))
    named = raised.get("scenario") if raised else None
    keep, others = [], 0
    for i, run in enumerate(runs):
        if run["failures"] or (named and run["scenario"] == named):
            keep.append(i)
        elif others < limit:
            keep.append(i)
            others += 1
    return keep


def runtime_facts() -> dict:
    """The runtime under test as results.json, the report and JUnit name it: version, git
    revision, origin (wheel, prefix-wheel, prefix-install), path, and a one-line description."""
    from harness.runtime import current

    from harness.runtime.variants import session_variant

    runtime = current()
    return {**runtime.facts(), "description": runtime.describe(), "variant": session_variant()}


def qnn_versions(session) -> dict:
    """The QNN libraries the session uses and their QAIRT version where it can be told."""
    out: dict = {"core_api_built_against": built_against_core_api()}
    try:
        sdk = session.sdk
    except HarnessError as exc:
        out["libraries"] = f"unavailable: {exc}"
        return out
    out["libraries"] = sdk.source if sdk.source == sdk.version else f"{sdk.source} ({sdk.version.strip()})"
    out["lib_dir"] = str(sdk.real_lib_dir)
    out["pairing"] = session.pairing.facts()
    if sdk.version.startswith("onnxruntime-qnn"):
        out["qairt"] = qairt_version(sdk)
    else:
        out["qairt"] = sdk.version.strip().splitlines()[0] if sdk.version.strip() else None
    return out


def outcome_of(phases: dict[str, pytest.TestReport]) -> tuple[str, bool]:
    """(passed | failed | error | skipped | xfailed | xpassed, whether it is an XPASS(strict))."""
    setup, call, teardown = (phases.get(w) for w in ("setup", "call", "teardown"))
    if setup is not None and setup.failed:
        return "error", False
    if setup is not None and setup.skipped:
        return ("xfailed" if hasattr(setup, "wasxfail") else "skipped"), False
    outcome, strict = "passed", False
    if call is not None:
        if call.failed:
            outcome = "failed"
            strict = str(call.longrepr).startswith("[XPASS(strict)]")
        elif call.skipped:
            outcome = "xfailed" if hasattr(call, "wasxfail") else "skipped"
        elif hasattr(call, "wasxfail"):
            outcome = "xpassed"
    if teardown is not None and teardown.failed and outcome not in ("failed",):
        outcome = "error"
    return outcome, strict


def message_of(phases: dict[str, pytest.TestReport], outcome: str) -> str:
    """A short why: the xfail reason, the skip reason, or the failure's message."""
    for when in ("setup", "call", "teardown"):
        r = phases.get(when)
        if r is None:
            continue
        if outcome == "xfailed" and hasattr(r, "wasxfail"):
            return str(r.wasxfail)
        if r.skipped and outcome == "skipped" and isinstance(r.longrepr, tuple):
            return str(r.longrepr[2])
        if r.failed:
            crash = getattr(getattr(r.longrepr, "reprcrash", None), "message", None)
            text = crash or str(r.longrepr)
            return text if len(text) <= 2000 else text[:2000] + "..."
    return ""


def _safe_unmatched(config: pytest.Config) -> list:
    try:
        return unmatched_issues(config) if config.stash.get(SESSION, None) else []
    except (HarnessError, OSError):
        return []


def _issue_json(issue) -> dict:
    return {"id": issue.id, "source": str(issue.source), "tests": list(issue.tests),
            "reason": issue.reason, "where": issue.where}


def _by_root(met: dict[str, dict]) -> dict[str, list[str]]:
    """The met bugs by the distinct defect each rests on (its `root`, else its own id)."""
    out: dict[str, list[str]] = {}
    for issue_id, entry in sorted(met.items()):
        if entry.get("bug"):
            out.setdefault(entry.get("root") or issue_id, []).append(issue_id)
    return dict(sorted(out.items()))


def _by_where(met: dict[str, dict]) -> dict[str, list[str]]:
    """The met issues' ids by where each defect lives (executorch, qnn, export, design,
    environment)."""
    out: dict[str, list[str]] = {}
    for issue_id, entry in sorted(met.items()):
        out.setdefault(entry.get("where") or "unknown", []).append(issue_id)
    return out
