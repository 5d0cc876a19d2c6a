"""benchmarks/ci_durations.py: .ci/run's step lines and a JUnit XML report as the markdown
tables of docs/timings.md, and the marked blocks it replaces there."""

import importlib.util
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("ci_durations", ROOT / "benchmarks" / "ci_durations.py")
ci_durations = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = ci_durations  # its dataclasses look their module up
spec.loader.exec_module(ci_durations)

# As .ci/run prints it: step lines among the steps' own output, then its table.
CI_LOG = """\
== setup
-- setup: 22 s
== 0. lint, types and layers
All checks passed!
-- 0. lint, types and layers: 6 s
== 1. full test suite (README test command), with the reports step 5 checks
-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html
=== 113 passed, 72 xfailed, 1 xpassed in 780.12s (0:13:00) ===
-- 1. full test suite (README test command), with the reports step 5 checks: 788 s
step times:
    22 s  setup
     6 s  0. lint, types and layers
   788 s  1. full test suite (README test command), with the reports step 5 checks
   817 s  total
"""

JUNIT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="13" time="30.5">
  <testcase classname="tests.hil.test_isolation" name="test_s1[fp16-A]"
            file="tests/hil/test_isolation.py" time="5.0"/>
  <testcase classname="tests.hil.test_isolation" name="test_s4[fp16]"
            file="tests/hil/test_isolation.py" time="3.0"/>
  <testcase classname="tests.framework.test_farm.TestPlaces" name="test_release" time="20.0"/>
  {small}
</testsuite></testsuites>
"""


def test_the_steps_of_a_ci_log_in_order_with_the_runs_own_total():
    steps = ci_durations.parse_ci_log(CI_LOG)
    assert steps.steps == [
        ("setup", 22), ("0. lint, types and layers", 6),
        ("1. full test suite (README test command), with the reports step 5 checks", 788)]
    assert steps.total == 817  # the run's own total, not the sum (816)
    table = ci_durations.steps_markdown(steps).splitlines()
    assert table[:2] == ["| step | seconds | share |", "| --- | ---: | ---: |"]
    assert table[2] == "| setup | 22 | 2.7 % |"
    assert table[-1] == "| total | 817 | |"


def test_a_log_with_ci_timestamps_or_only_the_end_table():
    stamped = "2026-01-02T03:04:05.678Z -- setup: 22 s\n2026-01-02T03:04:06.000Z -- 9. ssh: 3 s\n"
    assert ci_durations.parse_ci_log(stamped).steps == [("setup", 22), ("9. ssh", 3)]
    assert ci_durations.parse_ci_log(stamped).total == 25  # no table: the sum
    end_only = CI_LOG[CI_LOG.index("step times:"):]
    assert [s for _, s in ci_durations.parse_ci_log(end_only).steps] == [22, 6, 788]
    with pytest.raises(ci_durations.UsageError, match="no step"):
        ci_durations.parse_ci_log("== setup\nnothing else\n")


def test_junit_time_per_file_the_ten_slowest_and_their_share(tmp_path):
    small = "\n".join(f'<testcase classname="tests.framework.test_log" name="t{i}" time="0.25"/>'
                      for i in range(10))
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT.format(small=small))
    tests = ci_durations.parse_junit(report)
    assert len(tests.cases) == 13 and tests.wall == 30.5
    text = ci_durations.junit_markdown(tests)
    assert text.splitlines()[0] == "13 tests, 30.5 s of test time (the session's wall time: 30.5 s)."
    files = [line for line in text.splitlines() if line.startswith("| `tests/")
             and line.count("|") == 5]
    # By time; a file from `file`, or from the classname without its class.
    assert files == ["| `tests/framework/test_farm.py` | 1 | 20.0 | 65.6 % |",
                     "| `tests/hil/test_isolation.py` | 2 | 8.0 | 26.2 % |",
                     "| `tests/framework/test_log.py` | 10 | 2.5 | 8.2 % |"]
    slowest = text[text.index("The 10 slowest"):].splitlines()
    assert slowest[4] == "| `tests/framework/test_farm.py::test_release` | 20.0 |"
    assert slowest[5] == "| `tests/hil/test_isolation.py::test_s1[fp16-A]` | 5.0 |"
    assert len([line for line in slowest if line.startswith("| `")]) == 10
    # 20 + 5 + 3 and seven of the 0.25 s tests.
    assert slowest[-1] == "Those 10 take 29.8 s of 30.5 s, 97.5 % of the test time."


def test_update_replaces_only_the_marked_blocks(tmp_path):
    log, page = tmp_path / "ci.log", tmp_path / "timings.md"
    log.write_text(CI_LOG)
    page.write_text("# Timings\n\nby hand\n\n<!-- ci_durations:steps -->\nold table\n"
                    "<!-- /ci_durations:steps -->\n\nafter\n")
    assert ci_durations.main(["--ci-log", str(log), "--update", str(page)]) == 0
    text = page.read_text()
    assert "old table" not in text and "| setup | 22 | 2.7 % |" in text
    assert text.startswith("# Timings\n\nby hand\n\n<!-- ci_durations:steps -->\n| step |")
    assert text.endswith("| total | 817 | |\n<!-- /ci_durations:steps -->\n\nafter\n")
    # Again: the same page (the block's markers stay).
    assert ci_durations.main(["--ci-log", str(log), "--update", str(page)]) == 0
    assert page.read_text() == text
    # A table whose block the page lacks is an error, and the page is left as it was.
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT.format(small=""))
    assert ci_durations.main(["--ci-log", str(log), "--junitxml", str(report),
                              "--update", str(page)]) == 2
    assert page.read_text() == text


def test_a_report_with_each_tests_cpu_gives_a_cpu_column_and_the_costliest(tmp_path):
    cases = "\n".join(
        f'<testcase classname="tests.framework.test_{f}" name="t{i}" time="{t}"><properties>'
        f'<property name="cpu_s" value="{c}"/></properties></testcase>'
        for i, (f, t, c) in enumerate([("a", 10.0, 2.0), ("a", 1.0, 9.0), ("b", 4.0, 3.5)]))
    report = tmp_path / "junit.xml"
    report.write_text(JUNIT.format(small=cases).replace(
        '<testcase classname="tests.hil', '<testcase classname="tests.hil', 2))
    text = ci_durations.junit_markdown(ci_durations.parse_junit(report))
    assert ", 14.5 s of CPU" in text.splitlines()[0]
    assert "| `tests/framework/test_a.py` | 2 | 11.0 | 25.6 % | 11.0 |" in text
    assert "| `tests/hil/test_isolation.py` | 2 | 8.0 | 18.6 % | 0.0 |" in text
    costly = text[text.index("cost the most CPU"):].splitlines()
    assert costly[4] == "| `tests/framework/test_a.py::t1` | 9.0 | 1.0 |"
    assert costly[5] == "| `tests/framework/test_b.py::t2` | 3.5 | 4.0 |"


def test_the_project_conftest_records_each_tests_cpu(pytester):
    """tests/conftest.py's hooks write a `cpu_s` property a child process's time counts in."""
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_spin="""
        import subprocess, sys
        def test_spin():
            subprocess.run([sys.executable, "-c", "x = 0\\nfor i in range(3 * 10**6): x += i"])
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0",
                                           "--junitxml=junit.xml")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    tests = ci_durations.parse_junit(pytester.path / "junit.xml")
    assert tests.cases[0].cpu is not None and tests.cases[0].cpu >= 0.1


def test_the_lanes_steps_in_the_order_of_their_numbers():
    log = ("-- 1. full: 600 s\n[A] -- 3. adb: 17 s\n[B] -- 2. python: 26 s\n"
           "[A] -- 6b. venvs: 188 s\n[B] -- 10. variants: 108 s\n[B] -- 6. replay: 30 s\n"
           "-- 2-10, two lanes side by side (A: 3 6b; B: 2 6 10): 250 s\n")
    steps = ci_durations.parse_ci_log(log)
    assert [name for name, _ in steps.steps] == [
        "1. full", "2-10, two lanes side by side (A: 3 6b; B: 2 6 10)"]
    assert steps.total == 850
    assert [(lane, name[:3]) for lane, name, _ in steps.lane_steps] == [
        ("B", "2. "), ("A", "3. "), ("B", "6. "), ("A", "6b."), ("B", "10.")]
    table = ci_durations.steps_markdown(steps)
    assert "| 6b. venvs | A | 188 |" in table and table.index("| 6. replay") < table.index("| 6b.")
