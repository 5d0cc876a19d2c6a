"""Where CI's time goes, as markdown tables made from what CI prints and writes, so the timings
page (docs/timings.md) is generated, not typed by hand.

    python benchmarks/ci_durations.py --ci-log LOG                 # .ci/run's steps
    python benchmarks/ci_durations.py --junitxml junit.xml         # pytest's tests, by file
    python benchmarks/ci_durations.py --ci-log LOG --junitxml junit.xml --update docs/timings.md

- `--ci-log LOG`: the output of `.ci/run` (`.ci/run 2>&1 | tee LOG`). Each step prints
  `-- <step>: N s` as it ends, and the run ends with `step times:` and its table (`  N s  <step>`,
  `  N s  total`); the step lines are read (a leading CI timestamp is allowed), else the table.
  Printed: one row per step with its seconds and share of the total, and the total (the run's
  own, else the sum of the steps).
- `--junitxml FILE`: a pytest `--junitxml` report (xunit1 or xunit2). Printed: the time per test
  file (each test case's `file`, else its `classname` as a path), the ten slowest tests, and the
  share of those ten in the total test time (the sum of the test cases' times: under xdist more
  than the session's wall time, which is printed beside it).
- `--update PAGE`: instead of printing, replace each table's marked block in PAGE, between
  `<!-- ci_durations:steps -->` and `<!-- /ci_durations:steps -->` (`junit` for the JUnit
  tables). A page without the block of a table asked for is an error (exit 2).

Exit status 0; 2 for a usage error, an input without a step or a test case, or a missing block.
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

STEP_LINE = re.compile(r"^(?:\d{4}-\d\d-\d\dT\S+\s+)?-- (?P<step>.+): (?P<seconds>\d+) s\s*$")
# A step of a lane (steps 2-10 run as two lanes side by side): its line prefixed by the lane.
LANE_STEP_LINE = re.compile(
    r"^(?:\d{4}-\d\d-\d\dT\S+\s+)?\[(?P<lane>\w+)\] -- (?P<step>.+): (?P<seconds>\d+) s\s*$")
TABLE_LINE = re.compile(r"^(?:\d{4}-\d\d-\d\dT\S+\s+)?\s*(?P<seconds>\d+) s  (?P<step>.+?)\s*$")
TOP = 10


class UsageError(Exception):
    """An input or a page this script cannot use; main() prints it and exits 2."""


@dataclass
class Steps:
    steps: list[tuple[str, int]]
    total: int  # the run's own total when it printed one, else the sum of the steps
    lane_steps: list[tuple[str, str, int]] = field(default_factory=list)  # (lane, step, s)


def parse_ci_log(text: str) -> Steps:
    """The steps of a `.ci/run` log, in the order they ended."""
    lines = text.splitlines()
    steps: list[tuple[str, int]] = []
    lane_steps: list[tuple[str, str, int]] = []
    total = None
    for line in lines:
        m = STEP_LINE.match(line)
        if m:
            steps.append((m["step"], int(m["seconds"])))
        m = LANE_STEP_LINE.match(line)
        if m:
            lane_steps.append((m["lane"], m["step"], int(m["seconds"])))
    # The table that ends the run: its total, and its rows when the step lines are missing
    # (a log that kept only the end).
    starts = [i for i, line in enumerate(lines) if line.rstrip().endswith("step times:")]
    if starts:
        table: list[tuple[str, int]] = []
        for line in lines[starts[-1] + 1:]:
            m = TABLE_LINE.match(line)
            if not m:
                break
            if m["step"] == "total":
                total = int(m["seconds"])
                break
            table.append((m["step"], int(m["seconds"])))
        if not steps:
            steps = table
    if not steps:
        raise UsageError("no step in the CI log: no `-- <step>: N s` line and no `step times:` "
                         "table (is it the output of .ci/run?)")
    lane_steps.sort(key=lambda row: _step_order(row[1]))
    return Steps(steps, total if total is not None else sum(s for _, s in steps), lane_steps)


def _step_order(name: str) -> tuple[int, str]:
    """A step's place by its number ("6b. ..." after "6. ...", "10. ..." after "9. ...")."""
    m = re.match(r"(\d+)(\w*)\.", name)
    return (int(m[1]), m[2]) if m else (10**6, name)


@dataclass
class Case:
    file: str
    name: str
    seconds: float
    cpu: float | None = None  # the `cpu_s` property (tests/conftest.py), when the run wrote it

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"


@dataclass
class Tests:
    cases: list[Case]
    wall: float | None  # the test suites' own time (the session's wall time), when written


def _file_of(case: ET.Element) -> str:
    """A test case's file: xunit1's `file`, else its classname (`tests.hil.test_x.TestY`) as a
    path up to the test module."""
    if case.get("file"):
        return case.get("file", "")
    parts = (case.get("classname") or "").split(".")
    for i, part in enumerate(parts):
        if part.startswith("test_") or part.endswith("_test"):
            return "/".join(parts[:i + 1]) + ".py"
    return "/".join(parts) + ".py" if parts != [""] else "(no file)"


def _cpu_of(case: ET.Element) -> float | None:
    """The test's CPU seconds (its `cpu_s` property), or None for a report without them."""
    for prop in case.iter("property"):
        if prop.get("name") == "cpu_s":
            try:
                return float(prop.get("value") or "")
            except ValueError:
                return None
    return None


def parse_junit(path: Path) -> Tests:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise UsageError(f"{path}: not a JUnit XML report ({exc})") from exc
    cases = [Case(_file_of(c), c.get("name", ""), float(c.get("time") or 0), _cpu_of(c))
             for c in root.iter("testcase")]
    if not cases:
        raise UsageError(f"{path}: no test case in the JUnit XML report")
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    times = [float(s.get("time")) for s in suites if s.get("time")]
    return Tests(cases, sum(times) if times else None)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def steps_markdown(steps: Steps) -> str:
    rows = ["| step | seconds | share |", "| --- | ---: | ---: |"]
    rows += [f"| {_cell(name)} | {s} | {_share(s, steps.total)} |" for name, s in steps.steps]
    rows.append(f"| total | {steps.total} | |")
    if steps.lane_steps:
        rows += ["", "The lanes' steps, each its own wall time (the two lanes overlap):", "",
                 "| step | lane | seconds |", "| --- | --- | ---: |"]
        rows += [f"| {_cell(name)} | {lane} | {s} |" for lane, name, s in steps.lane_steps]
    return "\n".join(rows)


def junit_markdown(tests: Tests, top: int = TOP) -> str:
    """Time per file, the slowest tests and their share; with a CPU column (and the CPU-costliest
    tests) when the report has each test's `cpu_s`: on a CPU-bound machine that, not the wall
    time a worker spent beside the other, is what a test costs."""
    total = sum(c.seconds for c in tests.cases)
    with_cpu = any(c.cpu is not None for c in tests.cases)
    cpu_total = sum(c.cpu or 0.0 for c in tests.cases)
    per_file: dict[str, list[Case]] = {}
    for case in tests.cases:
        per_file.setdefault(case.file, []).append(case)
    files = sorted(per_file.items(), key=lambda kv: (-sum(c.seconds for c in kv[1]), kv[0]))
    wall = f" (the session's wall time: {tests.wall:.1f} s)" if tests.wall is not None else ""
    cpu = f", {cpu_total:.1f} s of CPU" if with_cpu else ""
    out = [f"{len(tests.cases)} tests, {total:.1f} s of test time{cpu}{wall}.", ""]
    if with_cpu:
        out += ["| test file | tests | seconds | share | CPU seconds |",
                "| --- | ---: | ---: | ---: | ---: |"]
    else:
        out += ["| test file | tests | seconds | share |", "| --- | ---: | ---: | ---: |"]
    for name, cases in files:
        seconds = sum(c.seconds for c in cases)
        row = f"| `{_cell(name)}` | {len(cases)} | {seconds:.1f} | {_share(seconds, total)} |"
        if with_cpu:
            row += f" {sum(c.cpu or 0.0 for c in cases):.1f} |"
        out.append(row)
    slowest = sorted(tests.cases, key=lambda c: (-c.seconds, c.id))[:top]
    top_total = sum(c.seconds for c in slowest)
    out += ["", f"The {len(slowest)} slowest tests:", "", "| test | seconds |", "| --- | ---: |"]
    out += [f"| `{_cell(c.id)}` | {c.seconds:.1f} |" for c in slowest]
    out += ["", f"Those {len(slowest)} take {top_total:.1f} s of {total:.1f} s, "
                f"{_share(top_total, total)} of the test time."]
    if with_cpu:
        costly = sorted(tests.cases, key=lambda c: (-(c.cpu or 0.0), c.id))[:top]
        out += ["", f"The {len(costly)} tests that cost the most CPU:", "",
                "| test | CPU seconds | seconds |", "| --- | ---: | ---: |"]
        out += [f"| `{_cell(c.id)}` | {c.cpu or 0.0:.1f} | {c.seconds:.1f} |" for c in costly]
    return "\n".join(out)


def update_block(page: str, block: str, body: str) -> str:
    """`page` with the text between `<!-- ci_durations:BLOCK -->` and its closing marker
    replaced by `body`."""
    begin, end = f"<!-- ci_durations:{block} -->", f"<!-- /ci_durations:{block} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(page):
        raise UsageError(f"no `{begin}` ... `{end}` block in the page")
    return pattern.sub(lambda _: f"{begin}\n{body}\n{end}", page, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ci-log", type=Path, help=".ci/run's output")
    parser.add_argument("--junitxml", type=Path, help="a pytest --junitxml report")
    parser.add_argument("--update", type=Path, metavar="PAGE",
                        help="replace the tables' marked blocks of PAGE instead of printing")
    args = parser.parse_args(argv)
    if not args.ci_log and not args.junitxml:
        parser.error("give --ci-log, --junitxml or both")
    try:
        tables: dict[str, str] = {}
        if args.ci_log:
            try:
                text = args.ci_log.read_text(errors="replace")
            except OSError as exc:
                raise UsageError(f"{args.ci_log}: {exc}") from exc
            tables["steps"] = steps_markdown(parse_ci_log(text))
        if args.junitxml:
            tables["junit"] = junit_markdown(parse_junit(args.junitxml))
        if args.update is None:
            print("\n\n".join(tables.values()))
            return 0
        page = args.update.read_text()
        for block, body in tables.items():
            try:
                page = update_block(page, block, body)
            except UsageError as exc:
                raise UsageError(f"{args.update}: {exc}") from exc
        args.update.write_text(page)
        print(f"{args.update}: updated {', '.join(tables)}")
        return 0
    except (UsageError, OSError) as exc:
        print(f"ci_durations: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
