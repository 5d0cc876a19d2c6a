"""`python -m harness matrix`: the chosen suites on several runtimes, as one table.

    python -m harness matrix --executorch 1.4.1 --executorch 1.5.1 \\
        [--qnn onnxruntime-qnn==2.3.0 ...] [--runtime-variant fix-model ...] [--out DIR]
        [pytest args]

Each runtime (every `--executorch` release with every `--qnn` requirement; without `--qnn` the
global environment's QNN libraries) gets its own cached virtual environment
(`harness.runtime.envs`), and pytest runs the given arguments there with `--hil-report`, so
every cell has its evidence: the runtime's `report.html`, its `results.json` and the artifacts
of the test's failing runs. The table has one row per test, grouped by the known issue whose
test patterns name it (whatever the version), and one column per runtime; a cell is XFAIL,
FAILED with the first words of the failure, PASSED, SKIPPED with the reason, XPASS or ERROR.
With `--runtime-variant NAME` each runtime also runs with that backend-registry variant
(harness.runtime.variants), a column beside the plain one; on a fix model, a test of an entry
the fix is meant to fix (`fixed_by`) that is XPASS(strict) is the cell "fixed", as expected.
A FAILED cell whose every failure is the known issue's (its kinds, its `match`) is marked
"= <issue>": with `--ignore-known-issues` among the pytest args that is how the matrix measures
which runtimes carry each bug. A runtime that cannot be installed or started here is a column
that says why (pip's words, e.g. a release that needs another torch).

Prints the table, writes `matrix.json` and `matrix.html` to `--out` (default
`reports/matrix`); exits 0 when every runtime ran and no cell is FAILED or ERROR, 1 otherwise,
2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from typing import Any
from pathlib import Path

from harness.results.failures import Failure
from harness.results.known_issues import WHERE_WORDS, KnownIssue, load_all
from harness.config.paths import DATA_ROOT
from harness.runtime.envs import RuntimeEnvError, runtime_label, runtime_venv
from harness.runtime.variants import fixed_by
from harness.storage import unusable_out_dir

SUITE_TIMEOUT_S = 3600
_FIRST_WORDS = 60


@dataclasses.dataclass
class Column:
    """One runtime: how it ran and what each test did on it."""

    label: str
    executorch: str
    qnn: str | None
    variant: str = "none"  # --runtime-variant of the column (harness.runtime.variants)
    status: str = "not run"  # "ran", or why it did not
    exit_status: int | None = None
    seconds: float = 0.0
    venv_seconds: float = 0.0
    report: Path | None = None
    results: Path | None = None
    runtime: dict = dataclasses.field(default_factory=dict)  # results.json environment
    tests: dict = dataclasses.field(default_factory=dict)  # nodeid -> results.json test
    failures: dict = dataclasses.field(default_factory=dict)  # nodeid -> [run failures]
    artifacts: dict = dataclasses.field(default_factory=dict)  # nodeid -> first artifacts dir


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness matrix",
        description="Run pytest on several ExecuTorch releases (and QNN library releases), each "
                    "in its own cached virtual environment, and tabulate the outcomes.")
    p.add_argument("--executorch", action="append", required=True, metavar="VERSION",
                   help="an executorch release from the package registry (repeatable)")
    p.add_argument("--qnn", action="append", default=[], metavar="REQUIREMENT",
                   help="QNN libraries to pair with each release, e.g. onnxruntime-qnn==2.3.0 "
                        "(repeatable; default: the global environment's)")
    p.add_argument("--runtime-variant", action="append", default=[], dest="variants",
                   metavar="NAME", help="also run each runtime with this backend-registry "
                   "variant (stock, fix-model, fix-model-serialized; repeatable): a column "
                   "each; on a fix model the entries it fixes are XPASS(strict) by design")
    p.add_argument("--out", type=Path, default=Path("reports") / "matrix",
                   help="where matrix.json, matrix.html and each runtime's report go")
    return p


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The matrix's own options and the pytest arguments (everything else)."""
    parser = _parser()
    args, pytest_args = parser.parse_known_args(argv)
    from packaging.version import InvalidVersion, Version

    for version in args.executorch:
        try:
            Version(version)
        except InvalidVersion:
            parser.error(f"--executorch {version!r} is not a release version (e.g. 1.4.1)")
    from harness.runtime.variants import VARIANTS

    for variant in args.variants:
        if variant not in VARIANTS:
            parser.error(f"--runtime-variant {variant!r} is not one of {', '.join(VARIANTS)}")
    for qnn in args.qnn:
        if not re.fullmatch(r"onnxruntime-qnn==[0-9][0-9A-Za-z.+]*", qnn):
            parser.error(f"--qnn {qnn!r}: expected onnxruntime-qnn==<version> (the QAIRT "
                         "simulator libraries it ships)")
    return args, pytest_args


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-")


def run_column(column: Column, pytest_args: list[str], out: Path) -> None:
    """Install the runtime (cached) and run pytest on it, filling `column`."""
    try:
        venv = runtime_venv(column.executorch, column.qnn)
    except RuntimeEnvError as exc:
        column.status = f"cannot install: {exc}"
        return
    column.venv_seconds = venv.seconds
    if venv.problem:
        column.status = f"cannot run here: {venv.problem}"
        return
    directory = (out / _slug(column.label)).resolve()
    report = directory / "report"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.pop("EXECUTORCH_HIL_EXECUTORCH_PREFIX", None)  # the venv's installed runtime is tested
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(DATA_ROOT), os.environ.get("PYTHONPATH", ""))
                                        if p)
    cmd = [str(venv.python), "-m", "pytest", *pytest_args, "-p", "no:cacheprovider",
           # "=" forms: pytest finds the rootdir before it knows these options, and takes a
           # separate value that exists for a path argument (see .ci/run, step 1)
           f"--hil-report={report}", f"--junitxml={report / 'junit.xml'}",
           f"--artifacts-dir={directory / 'artifacts'}", f"--runtime-variant={column.variant}"]
    env.pop("EXECUTORCH_HIL_RUNTIME_VARIANT", None)
    started = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "pytest.log").open("w") as log:
        try:
            proc = subprocess.run(cmd, cwd=DATA_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=SUITE_TIMEOUT_S)
            column.exit_status = proc.returncode
        except subprocess.TimeoutExpired:
            column.status = f"pytest timed out after {SUITE_TIMEOUT_S} s"
            return
    column.seconds = time.monotonic() - started
    results = report / "results.json"
    if not results.is_file():
        tail = (directory / "pytest.log").read_text(errors="replace").strip().splitlines()[-3:]
        column.status = f"pytest exited {column.exit_status} without results: {' '.join(tail)[:300]}"
        return
    doc = json.loads(results.read_text())
    column.status, column.report, column.results = "ran", report / "report.html", results
    column.runtime = {**(doc.get("environment", {}).get("runtime") or {}),
                      "qnn": doc.get("environment", {}).get("qnn", {}).get("libraries"),
                      "qairt": doc.get("environment", {}).get("qnn", {}).get("qairt")}
    column.tests = {t["nodeid"]: t for t in doc.get("tests", [])}
    for run in doc.get("runs", []):
        column.failures.setdefault(run["nodeid"], []).extend(run.get("failures") or [])
        if run.get("artifacts") and run.get("failures"):
            column.artifacts.setdefault(run["nodeid"], run["artifacts"])


def issue_of_test(nodeid: str, issues: list[KnownIssue]) -> KnownIssue | None:
    """The known issue whose test patterns name this test, whatever versions it lists (not an
    entry of valgrind findings alone: the matrix's sessions run without --valgrind)."""
    path, _, name = nodeid.partition("::")
    for issue in issues:
        if not issue.valgrind_only and issue.matches_test(DATA_ROOT / path, name):
            return issue
    return None


def carries(issue: KnownIssue | None, test: dict, failures: list[dict]) -> bool:
    """Whether the test failed with the issue's bug and nothing else (the plugin's xfail rule:
    every failure of its runs, and the test's own, of the issue's kinds and matching)."""
    if issue is None:
        return False
    if test.get("outcome") == "xfailed" and test.get("known_issue") == issue.id:
        return True
    if test.get("outcome") != "failed":
        return False
    found = list(failures) + (test.get("failure_parts") or
                              ([test["failure"]] if test.get("failure") else []))
    return bool(found) and all(issue.covers(Failure(f.get("kind") or "error", f.get("message") or "",
                                                    f.get("scenario") or ""))
                               for f in found)


def cell(column: Column, nodeid: str, issue: KnownIssue | None) -> dict:
    """One cell: its text, the outcome, whether it shows the issue's bug, and its evidence."""
    if column.status != "ran":
        return {"outcome": "not run", "text": "not run", "carries": None, "link": None}
    test = column.tests.get(nodeid)
    if test is None:
        return {"outcome": "absent", "text": "not collected", "carries": None, "link": None}
    outcome = test["outcome"]
    failure = (test.get("failure") or {}).get("message") if outcome == "failed" else None
    message = " ".join((failure or test.get("message") or "").split())
    text = {"xfailed": "XFAIL", "passed": "PASSED", "xpassed": "XPASS"}.get(outcome, outcome.upper())
    if outcome in ("failed", "error", "skipped"):
        words = re.sub(r"^([\w.]*(Skipped|HilFailure|AssertionError|Error)):\s*", "", message)
        text += f": {words[:_FIRST_WORDS]}" if words else ""
    if outcome == "xpassed" and test.get("xpass_strict"):
        text = "XPASS(strict)"
    if test.get("xpass_strict") and fixed_by(column.variant, test.get("known_issue")):
        outcome, text = "fixed", f"XPASS(strict): fixed by {column.variant}"
    bug = carries(issue, test, column.failures.get(nodeid, []))
    if bug and outcome == "failed" and issue is not None:
        text += f" (= {issue.id})"
    link = column.artifacts.get(nodeid) or (str(column.report) if column.report else None)
    return {"outcome": outcome, "text": text, "carries": bug, "link": link}


def build_matrix(columns: list[Column], issues: list[KnownIssue]) -> dict:
    nodeids: list[str] = []
    for column in columns:
        nodeids += [n for n in column.tests if n not in nodeids]
    rows: list[dict[str, Any]] = []
    for nodeid in nodeids:
        issue = issue_of_test(nodeid, issues)
        rows.append({"issue": issue.id if issue else None, "nodeid": nodeid,
                     "where": issue.where if issue else None,
                     "cells": {c.label: cell(c, nodeid, issue) for c in columns}})
    # Grouped by where the defect lives: runtime and QNN library defects (bugs found) first.
    order = {w: i for i, w in enumerate(WHERE_WORDS)}
    rows.sort(key=lambda r: (r["issue"] is None, order.get(r["where"] or "", len(order)),
                             r["issue"] or "", r["nodeid"]))
    runtimes = [{"label": c.label, "executorch": c.executorch, "qnn": c.qnn, "variant": c.variant,
                 "status": c.status,
                 "exit_status": c.exit_status, "seconds": round(c.seconds, 1),
                 "venv_seconds": round(c.venv_seconds, 1),
                 "report": str(c.report) if c.report else None,
                 "results": str(c.results) if c.results else None, "runtime": c.runtime}
                for c in columns]
    carried: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["issue"]:
            per = carried.setdefault(row["issue"], {})
            for label, value in row["cells"].items():
                if value["carries"] is not None:
                    per[label] = per.get(label, False) or bool(value["carries"])
    return {"schema": "executorch-hil-matrix/1", "runtimes": runtimes, "rows": rows,
            "issues_carried": carried}


def table_text(matrix: dict) -> str:
    from tabulate import tabulate

    labels = [r["label"] for r in matrix["runtimes"]]
    head = ["known issue", "test", *labels]
    body = [[f"{row['issue']} [{row.get('where')}]" if row["issue"] else "-",
             row["nodeid"].split("::", 1)[-1],
             *(row["cells"][label]["text"] for label in labels)] for row in matrix["rows"]]
    status = ["", "runtime status", *(r["status"] if r["status"] != "ran" else
                                      f"ran in {r['seconds']:.0f} s" for r in matrix["runtimes"])]
    return tabulate([status, *body], headers=head, tablefmt="simple", maxcolwidths=[34, 60] +
                    [44] * len(labels))


_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>ExecuTorch QNN HIL matrix</title>
<style>body{font-family:sans-serif}table{border-collapse:collapse}td,th{border:1px solid #ccc;
padding:3px 6px;font-size:13px;vertical-align:top}.failed,.error{background:#fdd}
.xfailed{background:#ffd}.passed{background:#dfd}.fixed{background:#def}.skipped{color:#666}.carries{font-weight:bold}
</style></head><body><h1>ExecuTorch QNN HIL matrix</h1>
<table><tr><th>known issue</th><th>test</th>
{% for r in runtimes %}<th>{{ r.label }}<br><small>{% if r.status == "ran" %}
{{ r.runtime.description }}; QNN {{ r.runtime.qnn }} (QAIRT {{ r.runtime.qairt }});
<a href="{{ r.report }}">report</a>, {{ r.seconds }} s{% else %}{{ r.status }}{% endif %}
</small></th>{% endfor %}</tr>
{% for row in rows %}<tr><td>{{ row.issue or "" }}{% if row.where %} [{{ row.where }}]{% endif %}</td>
<td>{{ row.nodeid }}</td>
{% for r in runtimes %}{% set c = row.cells[r.label] %}<td class="{{ c.outcome }}{% if c.carries %} carries{% endif %}">
{% if c.link %}<a href="{{ c.link }}">{{ c.text }}</a>{% else %}{{ c.text }}{% endif %}</td>{% endfor %}
</tr>{% endfor %}</table></body></html>
"""


def table_html(matrix: dict) -> str:
    """The page, rendered by Jinja2 with autoescaping (the runtime's messages are data)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined)
    return env.from_string(_HTML).render(**matrix)


def main(argv: list[str] | None = None) -> int:
    try:
        args, pytest_args = parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    issues = load_all([])
    qnns: list[str | None] = list(args.qnn) or [None]
    variants = ["none", *(v for v in args.variants if v != "none")]
    columns = [Column(runtime_label(v, q) + ("" if var == "none" else f" +{var}"), v, q, var)
               for v in args.executorch for q in qnns for var in variants]
    out = args.out
    unusable = unusable_out_dir(out, empty=False)  # a later matrix writes over its files
    if unusable:
        print(f"matrix: {unusable}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for column in columns:
        print(f"matrix: {column.label} ...", flush=True)
        run_column(column, pytest_args, out)
        print(f"matrix: {column.label}: {column.status}"
              + (f", pytest exit {column.exit_status} in {column.seconds:.0f} s"
                 f" (venv {column.venv_seconds:.0f} s)" if column.status == "ran" else ""),
              flush=True)
    matrix = build_matrix(columns, issues)
    (out / "matrix.json").write_text(json.dumps(matrix, indent=1) + "\n")
    (out / "matrix.html").write_text(table_html(matrix))
    print(table_text(matrix))
    print(f"matrix: {out / 'matrix.json'}, {out / 'matrix.html'}")
    bad = any(c["outcome"] in ("failed", "error") for r in matrix["rows"]
              for c in r["cells"].values())
    return 1 if bad or any(c.status != "ran" for c in columns) else 0
