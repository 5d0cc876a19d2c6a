"""The fork-against-process comparison of test_isolation_parity.py has power: two results.json
documents that agree give no difference, and each fact it compares, changed in one document
alone, is reported. Documents are built here in results.json's shape (what a `--hil-report`
run writes), so this runs in the unit set without running the suite twice."""

import copy

import pytest

from tests.framework.test_isolation_parity import differences

S1 = "tests/hil/test_isolation.py::test_s1_two_modules_same_program[linear_relu-fp16-A]"
RACE = "tests/hil/test_concurrent_execute.py::test_forced_destroy_during_execute[x]"


def step(index: int, op: str, status: str = "ok", contexts: int = 1) -> dict:
    return {"index": index, "op": op, "target": f"{op}(A)", "status": status, "error_code": 0,
            "live": {"backend": 1, "device": 1, "context": contexts},
            "memory": {"rss_kb": 20880 + index}}


def document() -> dict:
    run = {"nodeid": S1, "scenario": "s1_destroy_A", "occurrence": 0, "runner": "native",
           "returncode": 0, "completed": True, "failure_kind": None,
           "steps": [step(0, "load_module"), step(1, "execute"), step(2, "destroy_module", contexts=0)]}
    race = {**copy.deepcopy(run), "nodeid": RACE, "scenario": "race"}
    return {"tests": [{"nodeid": S1, "outcome": "xfailed", "xpass_strict": True, "message": "m",
                       "scenario_runs": 1},
                      {"nodeid": RACE, "outcome": "xfailed", "xpass_strict": True, "message": "m",
                       "scenario_runs": 1}],
            "runs": [run, race]}


def test_agreeing_documents_give_no_difference_and_count_the_steps():
    assert differences(document(), document()) == ([], 3)


def test_memory_and_a_races_runs_are_not_compared():
    other = document()
    other["runs"][0]["steps"][1]["memory"]["rss_kb"] += 100_000  # a fork maps more at start
    other["runs"][1]["steps"][1]["status"] = "error"  # a race ends where its timing says
    other["tests"][1]["scenario_runs"] = 4
    assert differences(document(), other) == ([], 3)


def _outcome(doc):
    doc["tests"][0]["outcome"] = "failed"


def _runs(doc):
    doc["tests"][0]["scenario_runs"] = 2


def _status(doc):
    doc["runs"][0]["steps"][1]["status"] = "error"


def _live(doc):
    doc["runs"][0]["steps"][2]["live"]["context"] = 1


def _ending(doc):
    doc["runs"][0]["returncode"] = -11


def _missing_step(doc):
    doc["runs"][0]["steps"].pop()


def _missing_run(doc):
    doc["runs"].pop(0)


def _runner(doc):
    doc["runs"][0]["runner"] = "python"


def _race_outcome(doc):
    doc["tests"][1]["outcome"] = "passed"


@pytest.mark.parametrize("change", [_outcome, _runs, _status, _live, _ending, _missing_step,
                                    _missing_run, _runner, _race_outcome])
def test_each_disagreement_is_reported(change):
    other = document()
    change(other)
    found, _ = differences(document(), other)
    assert found, change.__name__
