"""The HIL suite gives the same verdicts with each scenario a fork of the pre-loaded runner
(the default) as with each scenario a new runner process.

The sample is one test per test function of `tests/hil` (its first parametrization): every
scenario kind the suites drive (fixed orderings, explorations, races, fault injection, soak,
stateful, XNNPACK) runs in both modes, at a third of the suite's cost; what isolation can change
is how a scenario's process starts, which the parameters (program, dtype, module) do not touch.
Both runs go through `--hil-report`; compared: every test's outcome and number of scenario
runs, and for every run the report keeps its exit code, whether it completed, and per step the
status, error code, live QNN counts (backends, devices, contexts) and the sub-steps' statuses.
The report keeps every run with a failure and the first 100 others of each test (about 800 of
the suite's 9900 runs); a run it drops passed every check of its test in both modes, and those
checks are the same per-step facts (statuses and live counts against the reference model).
Memory readings are not compared: a fork starts with the QNN libraries already mapped, so
absolute Rss differs, and the suite's memory assertions compare a scenario's steps with each
other (growth over cycles, heap against mapped bytes), never with a value from another process.

The S5 cold-load tests are compared by outcome only: they stop at the first launch the runtime
crashes in (a race in the simulator, known issue qnn-concurrent-first-context-create-crash), and
which launch that is changes from run to run in either mode. So are the concurrent-execute
tests (known issues qnn-delegate-cache-concurrent-execute and -destroy-during-execute): which
rounds return another module's outputs, and whether a destroy racing an execute kills the
process or fails the next execute, are timing.
"""

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# A race inside one QNN call (the first-context create), forced into overlap or not, and the
# concurrent executes: their number of launches and endings vary by run.
RACY = ("tests/hil/test_concurrency.py::test_s5_parallel_cold_load",
        "tests/hil/test_concurrency.py::test_s5_cold_concurrent_first_context_create",
        "tests/hil/test_concurrent_execute.py::")


def sample() -> list[str]:
    """One node id per test function of tests/hil: the first of its parametrizations."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/hil", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=600)
    first: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        if "::" in line and not line.startswith(" "):
            first.setdefault(line.split("[", 1)[0], line.strip())
    assert first, proc.stdout[-3000:] + proc.stderr[-3000:]
    return list(first.values())


def run_suite(tmp_path: Path, isolation: str, nodeids: list[str]) -> dict:
    report = tmp_path / isolation
    argv = [sys.executable, "-m", "pytest", *nodeids, "-q", "-p", "no:cacheprovider",
            "--scenario-isolation", isolation, f"--hil-report={report}",
            f"--artifacts-dir={tmp_path / f'artifacts-{isolation}'}"]
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600)
    results = report / "results.json"
    assert results.is_file(), f"{isolation}: exit {proc.returncode}\n{proc.stdout[-3000:]}"
    return json.loads(results.read_text())


def outcome(test: dict) -> str:
    """A test's outcome as the modes must agree on it: a test of an intermittent known issue
    (a race) meets it in some runs only, so its XPASS and XFAIL are one outcome."""
    intermittent = test["outcome"] == "xpassed" and not test["xpass_strict"]
    return "xfailed" if intermittent else test["outcome"]


def step_facts(step: dict) -> tuple:
    return (step["index"], step["op"], step["target"], step["status"], step["error_code"],
            tuple(sorted(step["live"].items())),
            tuple(s["status"] for s in step.get("substeps", ())))


def runs_by_key(doc: dict) -> dict:
    return {(r["nodeid"], r["scenario"], r["occurrence"]): r for r in doc["runs"]
            if not r["nodeid"].startswith(RACY)}


def test_fork_and_process_give_the_same_verdicts(tmp_path):
    nodeids = sample()
    fork, process = (run_suite(tmp_path, mode, nodeids) for mode in ("fork", "process"))
    tests = {mode: {t["nodeid"]: t for t in doc["tests"]} for mode, doc in
             (("fork", fork), ("process", process))}
    assert tests["fork"].keys() == tests["process"].keys()
    assert len(tests["fork"]) >= 50, sorted(tests["fork"])
    for nodeid, f in tests["fork"].items():
        p = tests["process"][nodeid]
        assert outcome(f) == outcome(p), f"{nodeid}: fork {f['outcome']} ({f['message']}) " \
                                         f"vs process {p['outcome']} ({p['message']})"
        if not nodeid.startswith(RACY):
            assert f["scenario_runs"] == p["scenario_runs"], nodeid

    runs = {"fork": runs_by_key(fork), "process": runs_by_key(process)}
    assert runs["fork"].keys() == runs["process"].keys()
    assert len(runs["fork"]) > 500  # the explorations' kept runs, not only the fixed scenarios
    compared_steps = 0
    for key, f in runs["fork"].items():
        p = runs["process"][key]
        where = " ".join(map(str, key))
        assert f["runner"] == p["runner"] == "native", where
        assert (f["returncode"], f["completed"], f["failure_kind"]) == \
            (p["returncode"], p["completed"], p["failure_kind"]), where
        assert len(f["steps"]) == len(p["steps"]), where
        for fs, ps in zip(f["steps"], p["steps"]):
            assert step_facts(fs) == step_facts(ps), f"{where}: fork {fs} vs process {ps}"
            compared_steps += 1
    assert compared_steps > 4000
