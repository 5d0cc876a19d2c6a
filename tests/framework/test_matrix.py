"""`python -m harness matrix`: its arguments, and the table it makes from each runtime's
results.json (the documents here have the fields a real run writes: docs/results-schema.md).
The matrix run itself on two releases is CI's step (.ci/run)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.known_issues import load_known_issues
from harness.commands.matrix import Column, build_matrix, carries, parse_args, table_html, table_text

S1 = "tests/hil/test_isolation.py::test_s1_two_modules_same_program[linear_relu-fp16-A]"
S4 = "tests/hil/test_isolation.py::test_s4_cleanup_and_reload[linear_relu-fp16]"
DELETED = ("execute(forward) failed: Error::Internal (0x1)\nE executorch:QnnExecuTorchBackend.cpp:"
           "128] DelegateHandle has been deleted")


def column(label, s1: dict, s1_failures: list[dict], status="ran") -> Column:
    c = Column(label, label.split()[1], None, status=status)
    if status == "ran":
        c.tests = {S1: {"nodeid": S1, **s1}, S4: {"nodeid": S4, "outcome": "passed",
                                                   "message": "", "failure": None}}
        c.failures = {S1: s1_failures}
        c.artifacts = {S1: "/artifacts/s1"}
    return c


def test_arguments_split_into_the_matrix_and_pytest():
    args, rest = parse_args(["--executorch", "1.4.1", "--executorch", "1.5.1", "--qnn",
                             "onnxruntime-qnn==2.3.0", "tests/hil/test_isolation.py", "-k", "s1"])
    assert args.executorch == ["1.4.1", "1.5.1"] and args.qnn == ["onnxruntime-qnn==2.3.0"]
    assert rest == ["tests/hil/test_isolation.py", "-k", "s1"]


@pytest.mark.parametrize("argv, words", [
    (["--executorch", "latest"], "is not a release version"),
    (["--executorch", "1.5.1", "--qnn", "qairt-2.51"], "expected onnxruntime-qnn==<version>"),
    (["tests/hil"], "--executorch"),
])
def test_bad_arguments_are_one_usage_error(argv, words):
    proc = subprocess.run([sys.executable, "-m", "harness", "matrix", *argv],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_cells_say_what_each_runtime_did_and_which_carry_the_bug():
    issues = load_known_issues()
    failure = {"kind": "error", "message": DELETED}
    columns = [
        column("executorch 1.4.1", {"outcome": "failed", "message": "HilFailure: " + DELETED,
                                    "failure": failure}, [failure]),
        column("executorch 1.5.1", {"outcome": "xfailed", "known_issue":
                                    "qnn-delegate-cache-module-lifetime", "message": "known issue",
                                    "failure": failure}, [failure]),
        column("executorch 1.5.2", {"outcome": "failed", "message": "outputs differ",
                                    "failure": {"kind": "mismatch", "message": "outputs differ"}},
               [{"kind": "mismatch", "message": "outputs differ"}]),
        column("executorch 1.3.1", {}, [], status="cannot install: pip: ResolutionImpossible"),
    ]
    matrix = build_matrix(columns, issues)
    rows = {r["nodeid"]: r for r in matrix["rows"]}
    s1 = rows[S1]["cells"]
    assert rows[S1]["issue"] == "qnn-delegate-cache-module-lifetime" and rows[S4]["issue"] is None
    assert s1["executorch 1.4.1"]["text"].startswith("FAILED: execute(forward) failed")
    assert s1["executorch 1.4.1"]["text"].endswith("(= qnn-delegate-cache-module-lifetime)")
    assert s1["executorch 1.4.1"]["link"] == "/artifacts/s1"
    assert s1["executorch 1.5.1"]["text"] == "XFAIL" and s1["executorch 1.5.1"]["carries"]
    assert not s1["executorch 1.5.2"]["carries"]  # another failure is not the bug
    assert s1["executorch 1.3.1"]["text"] == "not run"
    assert rows[S4]["cells"]["executorch 1.4.1"]["text"] == "PASSED"
    assert matrix["issues_carried"]["qnn-delegate-cache-module-lifetime"] == {
        "executorch 1.4.1": True, "executorch 1.5.1": True, "executorch 1.5.2": False}
    text = table_text(matrix)
    assert "cannot install: pip: ResolutionImpossible" in text and "XFAIL" in text
    page = table_html(matrix)
    assert "<td>qnn-delegate-cache-module-lifetime [executorch]</td>" in page
    assert "&lt;" not in json.dumps(matrix) and 'href="/artifacts/s1"' in page


def test_a_failure_besides_the_bug_is_not_the_bug():
    [issue] = [i for i in load_known_issues() if i.id == "qnn-delegate-cache-module-lifetime"]
    bug = {"kind": "error", "message": DELETED}
    crash = {"kind": "crash", "message": "runner crashed with signal SIGSEGV"}
    assert carries(issue, {"outcome": "failed", "failure": bug}, [bug])
    assert not carries(issue, {"outcome": "failed", "failure": bug}, [bug, crash])
    assert not carries(issue, {"outcome": "passed", "failure": None}, [])


def test_a_cached_release_venv_whose_executorch_is_gone_is_rebuilt(tmp_path, monkeypatch):
    """`harness matrix` reused a cached venv whose site-packages/executorch was gone (its
    marker still there): the "executorch 1.4.1" column ran the global 1.5.1. The venv's
    identity is asked of the venv itself (its python imports executorch from the venv, at the
    release's version) before it is reused; a wrong one is rebuilt with a notice naming it.
    pip stands in for the registry here: it writes the release's package into the venv."""
    from harness.cache import CacheRepairWarning
    from harness.runtime import envs

    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    installs: list[list[str]] = []

    def pip(args, python, log):
        installs.append(args)
        site = next((Path(python).parent.parent / "lib").glob("python*/site-packages"))
        (site / "executorch").mkdir()
        (site / "executorch" / "version.py").write_text("__version__ = '1.4.1'\n")
        info = site / "executorch-1.4.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: executorch\n"
                                       "Version: 1.4.1\n")
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(envs, "_pip", pip)
    monkeypatch.setattr(envs, "_probe", lambda venv: "")
    venv = envs.runtime_venv("1.4.1")
    assert len(installs) == 1 and envs.venv_identity_problem(venv.path, "1.4.1") == ""
    assert envs.runtime_venv("1.4.1").seconds == 0 and len(installs) == 1  # cached, checked
    package = next(venv.path.glob("lib/python*/site-packages/executorch"))
    shutil.rmtree(package)
    problem = envs.venv_identity_problem(venv.path, "1.4.1")
    assert "not 1.4.1" in problem and "outside the venv" in problem, problem
    # the global executorch answered; asked for the global release itself, it serves the venv
    assert envs.venv_identity_problem(venv.path, problem.split()[3].split("+")[0]) == ""
    with pytest.warns(CacheRepairWarning, match=f"runtime venv {venv.path} is damaged"):
        again = envs.runtime_venv("1.4.1")
    assert len(installs) == 2 and again.seconds > 0 and package.is_dir()
    assert envs.venv_identity_problem(again.path, "1.4.1") == ""
    assert "is 1.4.1, not 1.4.0" in envs.venv_identity_problem(again.path, "1.4.0")
