"""The pytest plugin end to end, through pytester: options, known issues, clear errors."""

import textwrap

import pytest

from harness.cache import cache_root

pytest_plugins = ["pytester"]
CACHE = cache_root()  # read now: pytester points HOME at a temporary directory


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    """Reuse the compiled models, interposer and runner instead of rebuilding per test."""
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(CACHE))

S2_LIKE = """
from harness.assertions import assert_steps_ok
from harness.scenario import Scenario

def test_two_methods(compiled_model, scenario_driver):
    sc = Scenario("two_methods").load_module("M", compiled_model("prefill_decode"))
    sc.execute("M", "prefill").execute("M", "decode").destroy_module("M")
    assert_steps_ok(scenario_driver.run(sc))

def test_other_failure(compiled_model, scenario_driver):
    result = scenario_driver.run(Scenario("x").load_module("M", compiled_model("linear_relu")))
    assert False, "some unrelated failure"
"""


def known_issues(pytester, match="DelegateHandle has been deleted"):
    return pytester.makefile(".yaml", known=textwrap.dedent(f"""
        - id: pretend-bug
          executorch: [">=0.1"]
          tests: ["*::test_two_methods", "*::test_other_failure"]
          reason: pretend
          match: "{match}"
    """))


def test_known_issue_that_passes_is_a_strict_xpass_failure(pytester, hil_session):
    pytester.makepyfile(test_x=S2_LIKE)
    issues = known_issues(pytester)
    result = pytester.runpytest(f"--known-issues={issues}", f"--runner={hil_session.options.runner}",
                                "-k", "two_methods")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*pretend-bug*"])


def test_known_issue_with_a_different_failure_is_not_hidden(pytester, hil_session):
    pytester.makepyfile(test_x=S2_LIKE)
    issues = known_issues(pytester)
    result = pytester.runpytest(f"--known-issues={issues}", f"--runner={hil_session.options.runner}",
                                "-k", "other_failure")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expects a failure matching 'DelegateHandle has been deleted'*"])


def test_ignore_known_issues_runs_plain_tests(pytester, hil_session):
    pytester.makepyfile(test_x=S2_LIKE)
    issues = known_issues(pytester)
    result = pytester.runpytest(f"--known-issues={issues}", "--ignore-known-issues",
                                f"--runner={hil_session.options.runner}")
    result.assert_outcomes(passed=1, failed=1)


def test_unknown_soc_fails_with_the_known_list(pytester):
    pytester.makepyfile(test_x=S2_LIKE)
    result = pytester.runpytest("--soc=SM1234", "-k", "two_methods")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown SoC 'SM1234'*Known SoCs: SM8550, SM8650, SM8750*"])


def test_offline_device_fails_cleanly(pytester):
    pytester.makepyfile(test_x=S2_LIKE)
    result = pytester.runpytest("--device=127.0.0.1:1", "-k", "two_methods")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*HIL device unavailable*127.0.0.1:1 is not online*"])


def test_malformed_known_issues_file_is_a_usage_error(pytester):
    pytester.makepyfile(test_x=S2_LIKE)
    bad = pytester.makefile(".yaml", bad="- id: [\n")
    result = pytester.runpytest(f"--known-issues={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad.yaml*malformed YAML*"])
