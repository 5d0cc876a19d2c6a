"""The XNNPACK cache branches' closing table (harness.results.xnnpack_table): every branch of
tests/hil/xnnpack_branches.yaml names a test that exists, docs/xnnpack-cache.md carries a
generated row for each, in order, and a branch whose test gave no verdict is a hole that
stops the document from being written."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from harness.results import xnnpack_table
from harness.results.xnnpack import MIB

REPO = Path(__file__).resolve().parents[2]
BRANCHES = xnnpack_table.load_branches(REPO / xnnpack_table.BRANCHES)
DOC = REPO / "docs" / "xnnpack-cache.md"


@pytest.mark.parametrize("row", BRANCHES, ids=[r.test.split("::")[-1] for r in BRANCHES])
def test_every_branch_names_a_test_that_exists(row):
    path, name = row.test.split("::")
    function, _, param = name.partition("[")
    tree = ast.parse((REPO / path).read_text())
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert function in defs, f"{row.branch}: {path} has no {function}"
    if param:
        assert repr(param.rstrip("]")) in ast.unparse(defs[function]), \
            f"{row.branch}: {function} has no parameter id {param}"


def test_the_document_has_a_generated_row_per_branch_in_order():
    text = DOC.read_text()
    assert xnnpack_table.BEGIN in text and xnnpack_table.END in text
    region = text.split(xnnpack_table.BEGIN, 1)[1].split(xnnpack_table.END, 1)[0]
    rows = [line for line in region.splitlines() if line.startswith("| ") and "`test_" in line]
    assert [r.split(" | ")[0][2:] for r in rows] == \
        [xnnpack_table._cell(b.branch) for b in BRANCHES]
    assert "Generated from `results.json` of session" in region


def entry(scenario, heap, mapped, branch, errno=None, classification="fallback"):
    return {"scenario": scenario, "module": "A", "heap_bytes": int(heap * MIB),
            "mapped_bytes": int(mapped * MIB), "branch": branch, "errno": errno,
            "classification": classification, "loaded_entries": None}


def results(*tests):
    return {"session_id": "s1", "environment": {"executorch": "9.9"}, "tests": list(tests)}


ROWS = [xnnpack_table.Branch("`open(O_RDWR|O_CREAT)` fails: EROFS", "t.py::test_erofs"),
        xnnpack_table.Branch("partial index", "t.py::test_partial", "(^|_)partial"),
        xnnpack_table.Branch("full disk", "t.py::test_full")]


def test_a_run_gives_each_branch_its_placements_and_verdict():
    erofs = {"nodeid": "t.py::test_erofs", "outcome": "passed",
             "xnnpack": [entry("x1_1_erofs1", 32.1, 0, "open_failed", 30),
                         entry("x1_2_erofs2", 32.1, 0, "open_failed", 30)],
             "xnnpack_launches": [{"name": "erofs", "verdict": "permanent"}]}
    partial = {"nodeid": "t.py::test_partial", "outcome": "passed",
               "xnnpack": [entry("x1_1_write", 0.1, 32, "fresh_write", classification="mapped")]
               + [entry(f"x1_{i}_partial{i}", 16.1, 16.1, "loaded_from_disk")
                  for i in (2, 3, 4)] + [entry("x1_4_partial4", 16.1, 16.1, "loaded_from_disk")],
               "xnnpack_launches": [{"name": "partial", "verdict": "permanent"}]}
    full = {"nodeid": "t.py::test_full", "outcome": "xfailed", "known_issue": "sigbus",
            "message": "runner crashed with signal SIGBUS", "xnnpack": []}
    text, holes = xnnpack_table.table(results(erofs, partial, full), ROWS)
    assert holes == []
    lines = text.splitlines()
    assert "verdict on 9.9" in lines[0]
    assert lines[2] == ("| `open(O_RDWR\\|O_CREAT)` fails: EROFS | `t.py::test_erofs` | 32.1 / 0 "
                        "(x2) | fallback: open_failed errno 30 (EROFS); across launches: "
                        "permanent |")
    # the set-up launch is left out, a load classified twice counts once
    assert "| 16.1 / 16.1 (x3) | fallback: loaded_from_disk; across launches: permanent |" \
        in lines[3]
    assert "SIGBUS inside the cache file's mapping: crash, strict xfail `sigbus`" in lines[4]


def test_a_branch_without_a_verdict_is_a_hole_and_the_document_is_left_alone(tmp_path):
    failed = {"nodeid": "t.py::test_erofs", "outcome": "failed", "xnnpack": []}
    _, holes = xnnpack_table.table(results(failed), ROWS)
    assert [h.split(":")[0] for h in holes] == [r.branch.split(":")[0] for r in ROWS]
    doc = tmp_path / "doc.md"
    before = f"intro\n{xnnpack_table.BEGIN}\nold\n{xnnpack_table.END}\nafter\n"
    doc.write_text(before)
    run = tmp_path / "results.json"
    run.write_text(json.dumps(results(failed)))
    branches = tmp_path / "b.yaml"
    branches.write_text("- branch: x\n  test: t.py::test_erofs\n")
    assert xnnpack_table.main([str(run), "--branches", str(branches), "--write", str(doc)]) == 1
    assert doc.read_text() == before
    passed = {**failed, "outcome": "passed"}
    run.write_text(json.dumps(results(passed)))
    assert xnnpack_table.main([str(run), "--branches", str(branches), "--write", str(doc)]) == 0
    assert re.search(r"\| x \| `t.py::test_erofs` \| — \| passed \|", doc.read_text())
    assert doc.read_text().startswith("intro\n") and doc.read_text().endswith("after\n")
