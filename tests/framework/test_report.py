"""Reports as a person sees them: a small HIL selection run with --hil-report through pytester,
its page opened in headless Chromium (no console errors, every image decoded, a screenshot
kept), its JUnit properties, and `python -m harness compare` on real runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cache import cache_root
from harness.results import SCHEMA

from headless_chromium import find_browser, inspect_page

pytest_plugins = ["pytester"]
CACHE = cache_root()  # read now: pytester points HOME at a temporary directory
REPO = Path(__file__).resolve().parents[2]
ISOLATION = REPO / "tests" / "hil" / "test_isolation.py"
# Set it to keep the screenshot somewhere (docs/report-screenshot.png was made this way).
SCREENSHOT_ENV = "EXECUTORCH_HIL_REPORT_SCREENSHOT"
S1 = "tests/hil/test_isolation.py::test_s1_two_modules_same_program[linear_relu-fp16-{}]"
S4 = "tests/hil/test_isolation.py::test_s4_cleanup_and_reload[linear_relu-fp16]"


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    """Reuse the compiled models, interposer and runner instead of rebuilding per test."""
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(CACHE))


def hil_run(pytester, out: Path, selection: str, *args: str):
    """The project's own S1-S4 suite (its known issues apply by the file's real location)."""
    return pytester.runpytest_subprocess(
        str(ISOLATION), "-k", selection, "-p", "no:cacheprovider", f"--hil-report={out}",
        f"--junitxml={out / 'junit.xml'}", *args)


def properties(element) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in element.iterfind("properties/property")}


def test_report_page_as_a_person_sees_it(pytester, tmp_path):
    out = tmp_path / "report"
    result = hil_run(pytester, out, "fp16")
    result.assert_outcomes(passed=2, xfailed=4)
    result.stdout.fnmatch_lines([f"hil report: {out / 'report.html'} and {out / 'results.json'}"])

    # results.json: every scenario run with its steps, the tests' outcomes and known issues
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == SCHEMA and doc["totals"] == {"passed": 2, "xfailed": 4}
    tests = {t["nodeid"]: t for t in doc["tests"]}
    s1 = tests[S1.format("A")]
    assert s1["outcome"] == "xfailed" and s1["known_issue"] == "qnn-delegate-cache-module-lifetime"
    assert s1["failure"]["kind"] == "error" and s1["device"] == "simulator"
    run = next(r for r in doc["runs"] if r["nodeid"] == S1.format("A"))
    assert run["outcome"] == "xfailed" and run["scenario"] == "s1_destroy_A"
    failing = run["steps"][run["failures"][0]["step"]]
    assert failing["op"] == "execute" and failing["status"] == "error"
    assert "DelegateHandle has been deleted" in run["failures"][0]["message"]
    assert run["replay"] == f"python -m harness replay {run['artifacts']} --simulator"
    assert all({"op", "status", "message", "elapsed_ms", "live", "memory"} <= set(s)
               for r in doc["runs"] for s in r["steps"])
    assert doc["devices"][0]["soc"] == "SM8650" and doc["devices"][0]["runner"] == "native"
    assert doc["devices"][0]["state"]["start"]["available"] is False
    assert set(doc["known_issues"]["met"]) == {"qnn-delegate-cache-module-lifetime"}

    # JUnit XML (xunit1): per-test metrics and the session's facts
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    facts = properties(suite)
    assert facts["hil.device"] == "simulator" and facts["hil.soc"] == "SM8650"
    assert facts["hil.executorch"] and facts["hil.runner"] == "native" and facts["hil.qnn_libraries"]
    cases = {f"{c.get('file')}::{c.get('name')}": properties(c) for c in suite.iter("testcase")}
    s4 = cases[S4]
    assert s4["hil.live_end.context"] == "0" and int(s4["hil.peak_rss_kb"]) > 0
    assert float(s4["hil.execute_ms.linear_relu.forward.median"]) > 0
    assert cases[S1.format("B")]["hil.known_issue"] == "qnn-delegate-cache-module-lifetime"

    # The page in a browser
    if find_browser() is None:
        pytest.skip("no chromium to open the page with (scripts/setup.sh installs it)")
    shot = tmp_path / "report.png"
    page = inspect_page(out / "report.html", shot, width=1400, height=2400)
    assert page.console_errors == []
    assert page.broken_images == []
    assert len(page.decoded_images) >= 6 and page.shown_images  # a plot per test, shown
    assert page.rows == 6
    for words in ("HIL devices", "SM8650", "the HTP simulator runs on the host",
                  "qnn-delegate-cache-module-lifetime", "execute(forward) failed",
                  "runtime's message", "DelegateHandle has been deleted",
                  "replay: python -m harness replay"):
        assert words in page.text, words
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copyfile(shot, os.environ[SCREENSHOT_ENV])


def compare(old: Path, new: Path, *thresholds: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "compare", str(old / "results.json"),
                           str(new / "results.json"), *thresholds],
                          capture_output=True, text=True, timeout=120)


def test_compare_reports_new_failures_and_passes_identical_runs(pytester, tmp_path):
    selection = "fp16 and (s1 or s4)"
    first, again, ignoring = tmp_path / "first", tmp_path / "again", tmp_path / "ignoring"
    hil_run(pytester, first, selection).assert_outcomes(passed=1, xfailed=2)
    hil_run(pytester, again, selection).assert_outcomes(passed=1, xfailed=2)
    # The known issues as plain tests: S1 fails with the runtime's error, a new failure.
    hil_run(pytester, ignoring, selection, "--ignore-known-issues").assert_outcomes(passed=1,
                                                                                   failed=2)
    regression = compare(first, ignoring)
    assert regression.returncode == 1, regression.stdout + regression.stderr
    text = regression.stdout
    assert "NEW FAILURES (2)" in text and text.rstrip().endswith("REGRESSION")
    for side in "AB":
        line = next(l for l in text.splitlines() if S1.format(side) in l)
        assert "xfailed" in line and "failed" in line and "Error::Internal" in line, line

    # Two runs with the same outcomes; thresholds loose enough for a busy 2-core host, where
    # the simulator's step times move by several times between identical runs.
    clean = compare(first, again, "--time-threshold", "20", "--time-min-ms", "1000",
                    "--memory-threshold-kb", "65536")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "NEW FAILURES (0)" in clean.stdout and "OK: no new failure" in clean.stdout
    assert "matched 3 scenario runs" in clean.stdout
