"""The HIL suite gives the same verdicts with each scenario a fork of the pre-loaded runner
(the default) as with each scenario a new runner process.

The sample is one test per scenario kind: `tests/hil/scenario_kinds.txt` (a pytest argument
file, `python -m pytest @tests/hil/scenario_kinds.txt`), one node id per suite of tests/hil,
since each suite drives one kind of scenario (fixed orderings, ordering exploration, S5 races,
concurrent executes, fault injection, soak, stateful, XNNPACK cache and lifecycle, ...).
`test_the_sample_has_one_test_of_every_kind` holds it to that: a new suite without a line
fails. What isolation can change is how a scenario's process starts (a fork of a server that
holds the QNN libraries, or of one that holds none for XNNPACK-only programs, or a new
process), which a test's parameters (program, dtype, module) do not touch; so a second test
of the same kind runs the same start-up again. The whole suite twice cost 378 s of step 1's
test time on a cold run; the sample costs about 20 s, and with the ordering explorations it
still compares about 80 scenario runs and 800 steps. The same file is what CI runs per
transport (.ci/run steps 3 and 9; docs/ci-coverage.md).

Both runs go through `--hil-report`; compared (`differences`): every test's outcome and number
of scenario runs, and for every run the report keeps its exit code, whether it completed, and
per step the status, error code, live QNN counts (backends, devices, contexts) and the
sub-steps' statuses. Memory readings are not compared: a fork starts with the QNN libraries
already mapped, so absolute Rss differs, and the suite's memory assertions compare a
scenario's steps with each other (growth over cycles, heap against mapped bytes), never with a
value from another process. `test_isolation_parity_compare.py` shows the comparison fails on
each kind of disagreement.

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
KINDS_FILE = REPO_ROOT / "tests" / "hil" / "scenario_kinds.txt"
# A race inside one QNN call (the first-context create), forced into overlap or not, and the
# concurrent executes: their number of launches and endings vary by run.
RACY = ("tests/hil/test_concurrency.py::test_s5_parallel_cold_load",
        "tests/hil/test_concurrency.py::test_s5_cold_concurrent_first_context_create",
        "tests/hil/test_concurrent_execute.py::")


def sample() -> list[str]:
    """The node ids of tests/hil/scenario_kinds.txt (one argument a line, as pytest reads it)."""
    return [line for line in KINDS_FILE.read_text().splitlines() if line]


def collected() -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/hil", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=600)
    nodeids = [line.strip() for line in proc.stdout.splitlines()
               if "::" in line and not line.startswith(" ")]
    assert nodeids, proc.stdout[-3000:] + proc.stderr[-3000:]
    return nodeids


def run_suite(tmp_path: Path, isolation: str) -> dict:
    report = tmp_path / isolation
    argv = [sys.executable, "-m", "pytest", f"@{KINDS_FILE}", "-q", "-p", "no:cacheprovider",
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


def differences(fork: dict, process: dict) -> tuple[list[str], int]:
    """Where two results.json documents of the same tests disagree, and how many steps were
    compared."""
    found: list[str] = []
    tests = [{t["nodeid"]: t for t in doc["tests"]} for doc in (fork, process)]
    if tests[0].keys() != tests[1].keys():
        found.append(f"tests differ: {sorted(tests[0].keys() ^ tests[1].keys())}")
    for nodeid in tests[0].keys() & tests[1].keys():
        f, p = tests[0][nodeid], tests[1][nodeid]
        if outcome(f) != outcome(p):
            found.append(f"{nodeid}: fork {f['outcome']} ({f['message']}) vs process "
                         f"{p['outcome']} ({p['message']})")
        elif not nodeid.startswith(RACY) and f["scenario_runs"] != p["scenario_runs"]:
            found.append(f"{nodeid}: {f['scenario_runs']} scenario runs as forks, "
                         f"{p['scenario_runs']} as processes")
    runs = [runs_by_key(doc) for doc in (fork, process)]
    if runs[0].keys() != runs[1].keys():
        found.append(f"runs differ: {sorted(runs[0].keys() ^ runs[1].keys())[:10]}")
    compared = 0
    for key in sorted(runs[0].keys() & runs[1].keys()):
        f, p = runs[0][key], runs[1][key]
        where = " ".join(map(str, key))
        if not f["runner"] == p["runner"] == "native":
            found.append(f"{where}: runners {f['runner']}, {p['runner']} (native expected)")
        ends = [(r["returncode"], r["completed"], r["failure_kind"]) for r in (f, p)]
        if ends[0] != ends[1]:
            found.append(f"{where}: fork ended {ends[0]}, process {ends[1]}")
        if len(f["steps"]) != len(p["steps"]):
            found.append(f"{where}: {len(f['steps'])} steps as a fork, {len(p['steps'])} as "
                         f"a process")
        for fs, ps in zip(f["steps"], p["steps"]):
            if step_facts(fs) != step_facts(ps):
                found.append(f"{where}: fork {step_facts(fs)} vs process {step_facts(ps)}")
            compared += 1
    return found, compared


def test_the_sample_has_one_test_of_every_kind():
    nodeids, every = sample(), collected()
    suites = {n.split("::")[0] for n in every}
    picked = [n.split("::")[0] for n in nodeids]
    assert sorted(picked) == sorted(suites), (
        f"{KINDS_FILE.name} needs exactly one test of each suite of tests/hil: missing "
        f"{sorted(suites - set(picked))}, more than one in "
        f"{sorted({s for s in picked if picked.count(s) > 1})}")
    assert not set(nodeids) - set(every), "a line names no collected test"


def test_fork_and_process_give_the_same_verdicts(tmp_path):
    fork, process = (run_suite(tmp_path, mode) for mode in ("fork", "process"))
    assert {t["nodeid"] for t in fork["tests"]} == set(sample())
    found, compared = differences(fork, process)
    assert not found, "\n".join(found)
    # Every kind but the timing-judged races compared run by run, not only by outcome.
    assert {k[0] for k in runs_by_key(fork)} == {n for n in sample() if not n.startswith(RACY)}
    assert compared > 500, compared  # the explorations' steps, not only the fixed scenarios
