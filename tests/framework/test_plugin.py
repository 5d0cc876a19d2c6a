"""The pytest plugin end to end, through pytester: options, known issues, clear errors."""

import textwrap
from pathlib import Path

import pytest

from harness.cache import cache_root

pytest_plugins = ["pytester"]
CACHE = cache_root()  # read now: pytester points HOME at a temporary directory


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    """Reuse the compiled models, interposer and runner instead of rebuilding per test."""
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(CACHE))

S2_LIKE = """
from harness.results.assertions import assert_steps_ok
from harness.scenario import Scenario

def test_two_methods(compiled_model, scenario_driver):
    sc = Scenario("two_methods").load_module("M", compiled_model("prefill_decode"))
    sc.execute("M", "prefill").execute("M", "decode").destroy_module("M")
    assert_steps_ok(scenario_driver.run(sc))

def test_other_failure(compiled_model, scenario_driver):
    result = scenario_driver.run(Scenario("x").load_module("M", compiled_model("linear_relu")))
    assert False, "some unrelated failure"
"""


def known_issues(pytester, match="DelegateHandle has been deleted", intermittent=False):
    return pytester.makefile(".yaml", known=textwrap.dedent(f"""
        - id: pretend-bug
          executorch: [">=0.1"]
          tests: ["test_x.py::test_two_methods", "test_x.py::test_other_failure"]
          kind: [error, check]
          where: design
          reason: pretend
          match: "{match}"
          intermittent: {'true' if intermittent else 'false'}
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
    result.stdout.fnmatch_lines([
        "*known issue pretend-bug [[]design[]] (error/check matching 'DelegateHandle has been deleted') does "
        "not cover every failure of this run*",
        "*not covered check in test: some unrelated failure*"])


def test_an_intermittent_known_issue_passes_unmet_and_xfails_met(pytester, hil_session):
    """A race the runtime loses in some runs only: the run that met it is an xfail, the run
    that did not is a pass (XPASS, not strict), never a failure."""
    pytester.makepyfile(test_x=S2_LIKE)
    issues = known_issues(pytester, match="some unrelated failure", intermittent=True)
    result = pytester.runpytest(f"--known-issues={issues}", f"--runner={hil_session.options.runner}",
                                "-rxX")
    result.assert_outcomes(xpassed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*XFAIL*test_other_failure*known intermittent issue pretend-bug*"])
    result.stdout.fnmatch_lines(["*known issues met: 0 defect(s) found*",
                                 "*design limits*: pretend-bug (1 tests)*"])


def test_an_intermittent_known_issue_covers_only_its_own_failure(pytester, hil_session):
    pytester.makepyfile(test_x=S2_LIKE)
    issues = known_issues(pytester, intermittent=True)
    result = pytester.runpytest(f"--known-issues={issues}", f"--runner={hil_session.options.runner}")
    result.assert_outcomes(xpassed=1, failed=1)
    result.stdout.fnmatch_lines(["*known issue pretend-bug [[]design[]] (error/check matching 'DelegateHandle "
                                 "has been deleted') does not cover every failure of this run*"])


def test_ignore_known_issues_runs_plain_tests(pytester, hil_session):
    pytester.makepyfile(test_x=S2_LIKE)
    issues = known_issues(pytester)
    result = pytester.runpytest(f"--known-issues={issues}", "--ignore-known-issues",
                                f"--runner={hil_session.options.runner}")
    result.assert_outcomes(passed=1, failed=1)


def test_unknown_soc_fails_once_at_start_up_with_the_known_list(pytester):
    pytester.makepyfile(test_x=S2_LIKE)
    result = pytester.runpytest("--soc=SM1234")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown SoC 'SM1234'*Known SoCs: SM8550, SM8650, SM8750*"])


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


# Verdicts through real runs ------------------------------------------------------------------
S1_TEST = """
import dataclasses
from pathlib import Path

import numpy as np

from harness.results.assertions import assert_isolation, assert_outputs_consistent, assert_steps_ok
from harness.programs.compile import MethodReference
from harness.scenario.library import s1_two_modules
from harness.protocol.tensors import TensorFile

def wrong_reference(model, tmp_path):
    ref = model.methods["forward"]
    out = ref.expected[0]
    zeros = tmp_path / "wrong.bin"
    zeros.write_bytes(np.full(out.shape, 7, dtype=out.dtype).tobytes())
    wrong = MethodReference(ref.inputs, (TensorFile(out.dtype, out.shape, zeros),))
    return dataclasses.replace(model, methods={"forward": wrong})

def test_s1(compiled_model, scenario_driver, tmp_path, request):
    model = compiled_model("linear_relu")
    sc = s1_two_modules(model, "A", "s1")
    if request.config.getoption("--wrong-output", None):
        # Module A's reference is wrong, so its execute (step 2) is a mismatch, before the
        # known error at step 5.
        sc.models["A"] = wrong_reference(model, tmp_path)
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
"""
S1_CONFTEST = """
def pytest_addoption(parser):
    parser.addoption("--wrong-output", action="store_true")
"""
DELEGATE_CACHE = """
- id: delegate-cache
  executorch: [">=0.1"]
  tests: ["tests/hil/test_isolation.py::test_s1"]
  kind: [error]
  where: design
  match: "DelegateHandle has been deleted"
  reason: S1 on 1.5.1
"""


def s1_project(pytester):
    pytester.makeconftest(S1_CONFTEST)
    pytester.mkdir("tests")
    pytester.mkdir("tests/hil")
    (pytester.path / "tests" / "hil" / "test_isolation.py").write_text(S1_TEST)
    return pytester.makefile(".yaml", known=DELEGATE_CACHE)


def test_the_known_error_alone_is_an_xfail(pytester, hil_session):
    issues = s1_project(pytester)
    result = pytester.runpytest_subprocess(f"--known-issues={issues}",
                                           f"--runner={hil_session.options.runner}")
    result.assert_outcomes(xfailed=1)


def test_a_wrong_output_before_the_known_error_fails_the_test(pytester, hil_session):
    issues = s1_project(pytester)
    result = pytester.runpytest_subprocess(f"--known-issues={issues}",
                                           f"--runner={hil_session.options.runner}", "--wrong-output")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*known issue delegate-cache [[]design[]] (error matching 'DelegateHandle has been deleted') does not "
        "cover every failure of this run:",
        "*not covered mismatch in scenario s1 step 2 execute(A.forward): outputs differ*",
        "*covered     error in scenario s1 step 5 execute(B.forward)*"])


def test_project_entries_do_not_apply_to_a_users_test_of_the_same_name(pytester, hil_session):
    # tests/hil/test_isolation.py::test_s1... is a project entry; this user's file of the same
    # relative name is not the project's suite, so its S1 is a plain failure.
    s1_project(pytester)
    result = pytester.runpytest_subprocess(f"--runner={hil_session.options.runner}")
    result.assert_outcomes(failed=1)


def test_misspelt_match_is_a_usage_error(pytester):
    pytester.makepyfile(test_x=S2_LIKE)
    bad = pytester.makefile(".yaml", bad=DELEGATE_CACHE.replace("  match:", "  mach:"))
    result = pytester.runpytest(f"--known-issues={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad.yaml: invalid known-issues file:*",
                                 "*match: Field required*", "*mach: Extra inputs are not permitted*"])


@pytest.mark.parametrize("workers", ["0", "2"])
def test_strict_known_issues_fails_on_an_entry_that_matches_nothing(pytester, workers,
                                                                    monkeypatch):
    """The same usage error under xdist, where the workers collect (a UsageError raised there
    was an INTERNALERROR of xdist's worker_workerfinished, exit 3, "no tests ran")."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))  # this tree's
    pytester.makepyfile(test_x=S2_LIKE)
    stale = pytester.makefile(".yaml", stale=DELEGATE_CACHE.replace("test_s1", "test_s1_renamed"))
    result = pytester.runpytest_subprocess(f"--known-issues={stale}", "--strict-known-issues",
                                           "-p", "no:randomly", "-n", workers)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--strict-known-issues*match no collected test*",
                                 "*delegate-cache in *stale.yaml*"])


@pytest.mark.parametrize("args, message", [
    (["--device=127.0.0.1:5555", "--adb-server=127.0.0.1:99999"],
     ["*--adb-server: port 99999 is out of range (1-65535)*"]),
    (["--farm={farm}"], ["*empty.yaml: invalid farm file:",
                         "*line 1: devices: List should have at least 1 item*"]),
    (["--device-config={soc}"], ["*SM8650.yaml: invalid SoC config:",
                                 "*line 6: memory.htp_context_kbb*did you mean 'htp_context_kb'?"]),
])
def test_bad_input_is_one_usage_error_at_start_up(pytester, args, message):
    pytester.makepyfile(test_x=S2_LIKE)
    farm = pytester.makefile(".yaml", empty="devices: []\n")
    pytester.mkdir("socs")
    soc = pytester.path / "socs" / "SM8650.yaml"
    soc.write_text("soc: SM8650\nhtp_arch: 75\nvtcm_mb: 8\nmemory:\n  rss_leak_kb: 1\n"
                   "  htp_context_kbb: 4096\n")
    result = pytester.runpytest(*[a.format(farm=farm, soc=soc) for a in args])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(message)
    assert result.stderr.str().count("invalid") <= 1 and "Traceback" not in result.stderr.str()
