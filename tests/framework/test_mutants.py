"""The mutant catalogue (harness/runtime/mutants.yaml) and how `harness mutate` judges a pass,
on hand-made results: killed, masked and survived, the stages, the rotating sample."""

import re

import pytest

from harness.mutation.verdicts import judge, sample, stages
from harness.errors import ConfigError
from harness.runtime.mutants import CATALOGUE, OPERATORS, Mutant, load_mutants
from harness.runtime.variants import SOURCE


def test_the_catalogue_has_a_mutant_of_every_class_the_suites_must_catch():
    mutants = load_mutants()
    assert len(mutants) >= 25
    classes = {m.kind for m in mutants}
    for wanted in ("wrong output only a reference sees", "outputs crossing between live modules",
                   "QNN handles leaked", "QNN handles freed twice", "user counts off",
                   "memory growing per init", "memory growing per execute",
                   "error returned where none happened", "error swallowed where one happened",
                   "crash at the k-th call", "hang at the k-th call", "latency regression",
                   "state lost within a load", "state kept across a reload"):
        assert wanted in classes, wanted
    assert {m.boundary for m in mutants} == {"backend", "qnn"}


def test_every_operator_is_one_the_wrapper_applies():
    """A catalogue operator the C++ does not know would be a mutant that does nothing."""
    source = SOURCE.read_text()
    for op in OPERATORS:
        assert re.search(rf'op == "{op}"', source), op


@pytest.mark.parametrize("entry, words", [
    ("- {name: x-y, boundary: backend, class: c, spec: 'no_such_op', description: d}",
     "operator 'no_such_op'"),
    ("- {name: x-y, boundary: gpu, class: c, spec: 'init_leak', description: d}", "boundary"),
    ("- {name: x-y, boundary: qnn, class: c, spec: 'fail Nope#1 rc=1', description: d}",
     "unknown API"),
    ("- {name: x-y, boundary: backend, class: c, spec: 'init_leak'}", "exactly"),
])
def test_a_bad_catalogue_entry_is_refused(tmp_path, entry, words):
    path = tmp_path / "mutants.yaml"
    path.write_text(entry + "\n")
    with pytest.raises(Exception, match=re.escape(words)):
        load_mutants(path)


def test_repeated_names_are_refused(tmp_path):
    path = tmp_path / "mutants.yaml"
    path.write_text(CATALOGUE.read_text() + CATALOGUE.read_text())
    with pytest.raises(ConfigError, match="repeated"):
        load_mutants(path)


MUTANT = Mutant("m", "backend", "c", "init_leak", "d")


def doc(*tests, runs=()):
    return {"tests": [dict(nodeid=n, outcome=o, known_issue=k, xpass_strict=x)
                      for n, o, k, x in tests], "runs": list(runs)}


def test_a_new_failure_kills_and_an_xpass_strict_does_not():
    base = doc(("a", "passed", None, False), ("b", "xfailed", "k", False))
    assert judge(MUTANT, base, doc(("a", "failed", None, False))).verdict == "killed"
    assert judge(MUTANT, base, doc(("b", "failed", "k", True))).verdict == "survived"
    assert judge(MUTANT, base, doc(("b", "failed", "k", False))).killed_by == ["b"]


def test_a_pass_turned_xfail_is_masked_by_the_issue_that_excused_it():
    base = doc(("a", "passed", None, False))
    out = judge(MUTANT, base, doc(("a", "xfailed", "qnn-destroy-leaks-qnn-manager", False)))
    assert out.verdict == "masked"
    assert out.masked_by == ["a (qnn-destroy-leaks-qnn-manager)"]


def test_an_xfail_failing_in_new_ways_is_masked():
    run = {"nodeid": "b", "scenario": "s", "modules": {}, "steps": []}
    base = doc(("b", "xfailed", "k", False),
               runs=[{**run, "failures": [{"kind": "error", "step": 5}]}])
    same = doc(("b", "xfailed", "k", False),
               runs=[{**run, "failures": [{"kind": "error", "step": 5}]}])
    more = doc(("b", "xfailed", "k", False),
               runs=[{**run, "failures": [{"kind": "error", "step": 5},
                                          {"kind": "check", "step": None}]}])
    assert judge(MUTANT, base, same).verdict == "survived"
    assert judge(MUTANT, base, more).verdict == "masked"


def test_stages_put_the_isolation_suite_first_and_leave_nothing_out():
    tests = ["tests/hil/test_soak.py::t1", "tests/hil/test_isolation.py::t2",
             "tests/hil/test_orderings.py::t3"]
    got = stages(tests)
    assert got[0] == ["tests/hil/test_isolation.py::t2"]
    assert sorted(t for stage in got for t in stage) == sorted(tests)


def test_the_sample_rotates_with_its_key_and_covers_the_catalogue():
    mutants = load_mutants()
    a, b = sample(mutants, 6, "commit-a"), sample(mutants, 6, "commit-b")
    assert len(a) == 6 and len({m.name for m in a}) == 6
    assert sample(mutants, 6, "commit-a") == a
    seen = set()
    for key in range(40):
        seen |= {m.name for m in sample(mutants, 6, f"c{key}")}
    assert seen == {m.name for m in mutants}
    assert a != b or len(mutants) <= 6


def test_an_equivalent_mutant_needs_its_evidence_and_is_not_scored(tmp_path):
    from harness.mutation.verdicts import Outcome, score
    from harness.errors import ConfigError
    from harness.runtime.mutants import load_mutants

    path = tmp_path / "m.yaml"
    base = ("- name: destroy-twice\n  boundary: backend\n  class: c\n  spec: destroy_twice\n"
            "  description: d\n")
    path.write_text(base + "  equivalent: {stock: short}\n")
    with pytest.raises(ConfigError, match="evidence"):
        load_mutants(path)
    path.write_text(base + "  equivalent: {fixed: the runtime makes the second call harmless}\n")
    with pytest.raises(ConfigError, match="equivalent maps a variant"):
        load_mutants(path)
    path.write_text(base + "  equivalent: {stock: the runtime makes the second call harmless}\n")
    (m,) = load_mutants(path)
    assert m.equivalent_on("stock") and not m.equivalent_on("fix-model")
    killed = Outcome(m, verdict="killed")
    assert score([killed, Outcome(m, verdict="equivalent")]) == 1.0
    assert score([killed, Outcome(m, verdict="survived")]) == 0.5


def test_a_pass_leaves_out_tests_that_failed_unmutated():
    """On a fix model the seed's XPASS(strict) fail by design: under -x the first of them
    would end every mutant's pass before a test that can kill it ran."""
    from harness.mutation.verdicts import reachable

    (m,) = [m for m in load_mutants() if m.name == "init-leaks-16k"]
    qnn = {"A": {"backend": "qnn"}}
    baseline = {"runs": [{"nodeid": n, "modules": qnn} for n in ("s1", "soak", "xnn")],
                "tests": [{"nodeid": "s1", "outcome": "failed"},
                          {"nodeid": "soak", "outcome": "xfailed"},
                          {"nodeid": "xnn", "outcome": "passed"}]}
    baseline["runs"][2]["modules"] = {"A": {"backend": "xnnpack"}}
    assert reachable(baseline, m) == ["soak"]


def test_on_a_fix_model_a_mutant_that_brings_the_bug_back_is_killed():
    from harness.mutation.verdicts import fixed

    (m,) = [m for m in load_mutants() if m.name == "users-off-by-one"]
    qnn = {"A": {"backend": "qnn"}}
    baseline = {"runs": [{"nodeid": n, "modules": qnn, "scenario": n, "occurrence": 0,
                          "steps": []} for n in ("s3", "s4")],
                "tests": [{"nodeid": "s3", "outcome": "failed", "xpass_strict": True},
                          {"nodeid": "s4", "outcome": "passed"}]}
    assert fixed(baseline, m) == ["s3"]
    mutated = {"tests": [{"nodeid": "s3", "outcome": "xfailed", "known_issue": "cache"}],
               "runs": []}
    outcome = judge(m, baseline, mutated)
    assert outcome.verdict == "killed" and "fixed unmutated, xfailed now" in outcome.killed_by[0]
    still = {"tests": [{"nodeid": "s3", "outcome": "failed", "xpass_strict": True}], "runs": []}
    assert judge(m, baseline, still).verdict == "survived"


def test_short_stages_run_in_one_process_and_the_fixed_cells_before_the_rest_without_x():
    """Starting pytest-xdist's workers costs more than they save on a stage of a few short
    tests; a stage that took SERIAL_BELOW_S or more unmutated keeps them. The fixed cells run
    after the named stages and before every other test."""
    from harness.mutation.passes import SERIAL_BELOW_S, plan

    (m,) = [m for m in load_mutants() if m.name == "users-off-by-one"]
    qnn = {"A": {"backend": "qnn"}}
    ids = ["tests/hil/test_isolation.py::a", "tests/hil/test_soak.py::b",
           "tests/hil/test_orderings.py::c", "tests/hil/test_orderings.py::d"]
    baseline = {"runs": [{"nodeid": n, "modules": qnn} for n in ids],
                "tests": [{"nodeid": ids[0], "outcome": "passed", "duration_s": 0.3},
                          {"nodeid": ids[1], "outcome": "xfailed", "duration_s": SERIAL_BELOW_S},
                          {"nodeid": ids[2], "outcome": "passed", "duration_s": 1.0},
                          {"nodeid": ids[3], "outcome": "failed", "xpass_strict": True,
                           "duration_s": 50.0}]}
    assert plan(m, baseline) == [([ids[0]], True, True), ([ids[1]], True, False),
                                 ([ids[3]], False, False), ([ids[2]], True, True)]


def test_a_race_that_ends_elsewhere_is_not_a_masked_mutant():
    """A racing test's XFAIL meets its race's endings at other steps from run to run with
    nothing injected: judged by its outcome only, never masked by where its runs failed."""
    (m,) = [m for m in load_mutants() if m.name == "init-leaks-16k"]

    def doc(step):
        return {"tests": [{"nodeid": node, "outcome": "xfailed", "known_issue": "race"}
                          for node in (RACE, PLAIN)],
                "runs": [{"nodeid": node, "scenario": "s", "occurrence": 0, "steps": [],
                          "failures": [{"kind": "error", "step": step}]}
                         for node in (RACE, PLAIN)]}

    RACE = "tests/hil/test_concurrent_execute.py::test_forced_destroy_during_execute[x]"
    PLAIN = "tests/hil/test_init_failure.py::test_s6_failed_init_releases_every_handle[y]"
    outcome = judge(m, doc(3), doc(5))
    assert outcome.verdict == "masked" and [PLAIN in w for w in outcome.masked_by] == [True]


def test_a_session_passes_its_options_to_the_mutant_passes_but_not_its_tests_or_reports():
    from harness.report.mutation import pass_options

    argv = ["tests/hil/test_isolation.py", "-k", "s1", "--device=emulator-5554", "-n", "2",
            "--hil-report", "out", "--mutate=3", "--mutate-floor", "1.0", "-x",
            "--runtime-variant=stock", "--junitxml=j.xml", "tests/hil/test_soak.py::t"]
    assert pass_options(argv, ["tests/hil/test_isolation.py", "tests/hil/test_soak.py::t"]) == [
        "-k", "s1", "--device=emulator-5554", "-n", "2"]


def test_only_a_latency_regression_is_killed_by_step_times_and_never_in_a_race_test():
    """A slower step kills a mutant of the catalogue's latency class, outside the race tests
    (which wait on purpose); any other mutant beside the same slower step survives: load that
    moved a step is no verdict on a leak or a wrong output."""
    latency = next(m for m in load_mutants() if m.kind == "latency regression")
    leak = next(m for m in load_mutants() if m.name == "init-leaks-16k")

    def doc(ms, nodeid="tests/hil/test_isolation.py::test_s4[x]"):
        step = {"index": 2, "op": "execute", "module": "A", "method": "forward",
                "elapsed_ms": ms}
        return {"tests": [{"nodeid": nodeid, "outcome": "passed"}],
                "runs": [{"nodeid": nodeid, "scenario": "s4", "occurrence": 0,
                          "steps": [step]}]}

    assert judge(latency, doc(10.0), doc(900.0)).verdict == "killed"
    assert judge(latency, doc(10.0), doc(20.0)).verdict == "survived"
    assert judge(leak, doc(10.0), doc(900.0)).verdict == "survived"
    race = "tests/hil/test_concurrency.py::test_s5_warm_forced[x]"
    assert judge(latency, doc(10.0, race), doc(900.0, race)).verdict == "survived"


def test_a_mutant_pass_waits_for_a_hung_runner_ten_times_its_longest_unmutated_test():
    """A hanging mutant is killed at its pass's runner timeout: ten times the longest of the
    pass's tests unmutated, never under the floor the nemesis holds need, never over the
    passes' old fixed 120 s."""
    from harness.mutation.passes import (MIN_RUNNER_TIMEOUT_S, RUNNER_TIMEOUT_S, TIMEOUT_FACTOR,
                                         pass_runner_timeout)
    from harness.protocol.nemesis import DEFAULT_TIMEOUT_MS

    baseline = {"tests": [{"nodeid": "short", "duration_s": 0.3},
                          {"nodeid": "long", "duration_s": 4.0},
                          {"nodeid": "soak", "duration_s": 60.0},
                          {"nodeid": "no_time", "duration_s": None}]}
    assert MIN_RUNNER_TIMEOUT_S * 1000 > DEFAULT_TIMEOUT_MS
    assert pass_runner_timeout(["short"], baseline) == MIN_RUNNER_TIMEOUT_S
    assert pass_runner_timeout(["no_time", "unknown"], baseline) == MIN_RUNNER_TIMEOUT_S
    assert pass_runner_timeout(["short", "long"], baseline) == TIMEOUT_FACTOR * 4.0
    assert pass_runner_timeout(["long", "soak"], baseline) == RUNNER_TIMEOUT_S
