"""Known issues: the schema of the file, which tests an entry applies to, and the verdict rule
(an entry excuses a run only when every failure of it is that issue).

The run outputs here are what a runner writes (events on stdout, step markers and the
runtime's log lines on stderr, the exit status), so the code under test is the code that reads
real runs; end-to-end runs through pytest are in test_plugin.py.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from harness.results.assertions import (assert_completed, assert_isolation, assert_live_counts,
                                assert_steps_ok)
from harness.programs.compile import CompiledModel, MethodReference
from harness.errors import ConfigError
from harness.results.failures import Failure, failure_of, run_failures
from harness.results.known_issues import (DEFAULT_PATH, PROJECT_ROOT, KnownIssue, issue_for, load_all,
                                  load_known_issues, uncovered)
from harness.protocol.output import RunOutput
from harness.results.run import ScenarioResult
from harness.protocol.wire import EVENT_PREFIX
from harness.scenario.library import s1_two_modules

ISOLATION = PROJECT_ROOT / "tests" / "hil" / "test_isolation.py"
KNOWN_ERROR = ("E 00:00:00.069393 executorch:QnnExecuTorchBackend.cpp:128] DelegateHandle has "
               "been deleted")


def issue(kinds=("error",), match="DelegateHandle has been deleted") -> KnownIssue:
    return KnownIssue("delegate-cache", ("1.5.1",), ("tests/hil/test_isolation.py::test_s1_*",),
                      "r", match, tuple(kinds))


# Loading -----------------------------------------------------------------------------------
def test_project_file_loads_and_every_entry_states_kind_and_match():
    issues = load_known_issues()
    assert issues and all(i.kinds and i.match and i.reason for i in issues)
    assert all(i.base == PROJECT_ROOT and i.source == DEFAULT_PATH for i in issues)


def test_entries_match_the_test_files_real_location(tmp_path):
    issues = load_known_issues()
    name = "test_s1_two_modules_same_program[A-fp16]"
    found = issue_for(ISOLATION, name, "1.5.1", issues)
    assert found is not None and found.id == "qnn-delegate-cache-module-lifetime"
    assert issue_for(ISOLATION, name, "0.4.0", issues) is None  # keyed by version (0.4 had no cache)
    assert issue_for(ISOLATION, name, "1.6.0a0+git1a2b3c4", issues) is found  # main still has it
    assert issue_for(ISOLATION, "test_s2_methods_share_one_context[fp16]", "1.5.1", issues) is None
    # A user's own file at the same relative path in another project inherits nothing.
    own = tmp_path / "tests" / "hil" / "test_isolation.py"
    own.parent.mkdir(parents=True)
    own.write_text("")
    assert issue_for(own, name, "1.5.1", issues) is None


def test_user_file_patterns_are_relative_to_its_directory(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("- id: mine\n  executorch: ['<=1.5.1']\n  tests: ['tests/test_a.py::test_x*']\n"
                    "  kind: [check]\n  match: boom\n  reason: r\n  where: design\n")
    [mine] = load_known_issues(path)
    assert mine.base == tmp_path
    assert mine.matches_test(tmp_path / "tests" / "test_a.py", "test_x[1]")
    assert not mine.matches_test(PROJECT_ROOT / "tests" / "test_a.py", "test_x[1]")
    assert mine.applies_to("1.4.0") and not mine.applies_to("1.5.2")
    assert [i.id for i in load_all([path])][-1] == "mine"  # added to the project's, not instead


@pytest.mark.parametrize("specifier, version, applies", [
    (">=0.5,<=1.5.1", "1.4.1", True),
    (">=0.5,<=1.5.1", "1.5.1", True),
    (">=0.5,<=1.5.1", "0.4.0", False),
    (">=0.5,<=1.5.1", "1.5.1+cpu", True),           # a local build of a release is that release
    (">=0.5,<=1.5.1", "1.5.1+git3b60683", True),
    (">=0.5,<=1.5.1", "1.6.0a0+git1a2b3c4", False),  # a build towards 1.6.0 is past 1.5.1
    (">=0.5", "1.6.0a0+git1a2b3c4", True),           # pre-releases are matched, not skipped
    (">1.5.1", "1.6.0.dev20261201", True),
    ("1.5.1", "1.5.1+cpu", True),                    # a bare version is ==
    ("1.5.1", "1.5.0", False),
    (">=1.4", "unknown", False),                     # an unknown runtime matches nothing
])
def test_executorch_versions_are_pep440_specifiers(tmp_path, specifier, version, applies):
    path = tmp_path / "k.yaml"
    path.write_text(ENTRY.replace("['1.5.1']", repr(specifier)))
    [entry] = load_known_issues(path)
    assert entry.applies_to(version) is applies


def test_an_entry_may_name_the_qnn_libraries_it_applies_to(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text(ENTRY.replace("['1.5.1']", "['>=0.5,<1.5', '==1.5.1']")
                    .replace("  kind:", "  qnn: '>=2.47,<2.51'\n  kind:"))
    [entry] = load_known_issues(path)
    assert entry.applies_to("1.4.1", "2.47.0") and entry.applies_to("1.5.1", "2.50.0")
    assert not entry.applies_to("1.5.0", "2.47.0")  # neither item of the list
    assert not entry.applies_to("1.5.1", "2.51.0")
    assert not entry.applies_to("1.5.1", None)       # QAIRT unknown: not claimed


ENTRY = ("- id: a\n  executorch: ['1.5.1']\n  tests: ['t.py::x']\n  kind: [error]\n"
         "  match: boom\n  reason: r\n  where: design\n")


@pytest.mark.parametrize("text, words", [
    (ENTRY.replace("  match:", "  mach:"),
     ["line 1: [0].match: Field required", "line 5: [0].mach: Extra inputs are not permitted",
      "did you mean 'match'?"]),
    (ENTRY.replace("  match: boom\n", ""), ["match: Field required"]),
    (ENTRY.replace("  kind: [error]\n", ""), ["kind: Field required"]),
    (ENTRY.replace("[error]", "[segfault]"), ["line 4: [0].kind[0]", "'error'"]),
    (ENTRY.replace("boom", "'('"), ["line 5: [0].match", "not a valid regular expression"]),
    (ENTRY.replace("boom", "''"), ["match", "at least 1 character"]),
    (ENTRY.replace("['1.5.1']", "'=>1.5'"), ["line 2: [0].executorch", "'=>1.5' is neither a "
                                            "version nor a PEP 440 specifier set"]),
    (ENTRY.replace("['1.5.1']", "['1.5.1', '1.5.x']"), ["[0].executorch", "'1.5.x'"]),
    (ENTRY.replace("  kind:", "  qnn: 'latest'\n  kind:"), ["line 4: [0].qnn", "'latest'"]),
    (ENTRY.replace("['1.5.1']", "[]"), ["[0].executorch"]),
    (ENTRY.replace("['t.py::x']", "[]"), ["tests: at least one pattern"]),
    (ENTRY.replace("- id: a", "- id: 3"), ["line 1: [0].id", "valid string"]),
    ("id: a\n", ["expected a list at the top level"]),
    (ENTRY + ENTRY, ["known issue id 'a' is also defined"]),
    (ENTRY + "  size: [900, 8000]\n", ["size: needs `match` to capture", "(?P<size>...)"]),
    (ENTRY.replace("boom", "'boom (?P<size>[0-9]+)'") + "  size: [8000, 900]\n",
     ["size: [8000, 900] is not a range"]),
    (ENTRY.replace("boom", "'boom (?P<size>[0-9]+)'") + "  size: [900]\n", ["size", "at least 2"]),
    (ENTRY + "  sizes: {size_context: [900, 8000]}\n",
     ["sizes.size_context: needs `match` to capture", "(?P<size_context>...)"]),
    (ENTRY.replace("boom", "'boom (?P<context>[0-9]+)'") + "  sizes: {context: [900, 8000]}\n",
     ["sizes.context: a further size's group is named size_<what>"]),
    (ENTRY.replace("boom", "'boom (?P<size_x>[0-9]+)'") + "  sizes: {size_x: [9, 1, 3]}\n",
     ["sizes.size_x: [9, 1, 3] is not a range"]),
])
def test_bad_entries_name_the_file_line_and_key(tmp_path, text, words):
    path = tmp_path / "k.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_known_issues(path)
    message = str(exc.value)
    assert str(path) in message
    for word in words:
        assert word in message, message


# Runs as a runner reports them ---------------------------------------------------------------
def model(tmp_path: Path) -> CompiledModel:
    pte = tmp_path / "model.pte"
    pte.write_bytes(b"\0\0\0\0ET12")
    return CompiledModel("linear_relu", "qnn", "SM8650", "fp16", pte,
                         {"forward": MethodReference((), ())}, 0.05, 0.05)


# A step's memory as the runners report it (runner-protocol.md): the events here are the
# protocol's own, or the run would fail as a protocol error.
MEMORY = {"rollup": {"Rss": 1000}, "mappings": {}, "dmabuf": {"count": 0, "bytes": 0}}


def s1_run(tmp_path, statuses: dict[int, str], stderr_by_step: dict[int, str] | None = None,
           returncode: int | None = None, end: bool = True, last: int | None = None,
           digests: dict[int, str] | None = None) -> ScenarioResult:
    """An S1 run (steps: load A, load B, exec A, exec B, destroy A, exec B, destroy B,
    snapshot) as a runner writes it; `last` stops the events after that step (a crash)."""
    sc = s1_two_modules(model(tmp_path), "A")
    stdout, stderr = [], []
    for i, step in enumerate(sc.steps):
        if last is not None and i > last:
            stderr.append(f"HARNESS_STEP {i}")  # started, never reported
            stderr += (stderr_by_step or {}).get(i, "").splitlines()
            break
        stderr.append(f"HARNESS_STEP {i}")
        stderr += (stderr_by_step or {}).get(i, "").splitlines()
        status = statuses.get(i, "ok")
        event = {"event": "step", "index": i, "op": step.op, "module": step.module,
                 "method": step.method, "status": status,
                 "error_code": 1 if status == "error" else 0,
                 "message": "execute(forward) failed: Error::Internal (0x1)" if status == "error" else "",
                 "elapsed_ms": 1.0,
                 "outputs": [{"dtype": "float32", "shape": [1], "sha256": (digests or {}).get(i, "same")}]
                 if step.op == "execute" else [],
                 "max_abs_diff": 0.7 if status == "mismatch" else 0.0, "option": None,
                 "trace_offset": 0, "memory": MEMORY}
        stdout.append(EVENT_PREFIX + json.dumps(event))
    if end and last is None:
        stderr.append("HARNESS_STEP -1")
        failed_steps = sum(v != "ok" for v in statuses.values())
        stdout.append(EVENT_PREFIX + json.dumps({"event": "end", "status": "failed" if failed_steps else "ok",
                                                 "steps": len(sc.steps), "failed_steps": failed_steps}))
    failed = any(v != "ok" for v in statuses.values())
    rc = returncode if returncode is not None else (1 if failed else 0)
    output = RunOutput(rc, "\n".join(stdout), "\n".join(stderr), runner="native")
    return ScenarioResult.build(sc, output, [])


def verdict(result: ScenarioResult, known: KnownIssue):
    """What the plugin decides: the failures of the run, and those the entry does not cover."""
    try:
        assert_steps_ok(result)
    except AssertionError as exc:
        raised = failure_of(exc)
    failures = run_failures(result)
    if raised.kind == "check" or not failures:
        failures.append(raised)
    return failures, uncovered(known, failures)


def test_the_known_error_alone_is_covered(tmp_path):
    result = s1_run(tmp_path, {5: "error"}, {5: KNOWN_ERROR})
    failures, missed = verdict(result, issue())
    assert [(f.kind, f.step) for f in failures] == [("error", 5)]
    assert "DelegateHandle has been deleted" in failures[0].message
    assert missed == []


def test_an_event_that_breaks_the_protocol_fails_the_run_and_no_issue_covers_it(tmp_path):
    # The known error at step 5, and a runner whose step 2 event carries a field the protocol
    # does not have: the run's events are checked once against the protocol's types, and the
    # bad one is a failure of its own ("protocol"), which no known issue can excuse.
    good = s1_run(tmp_path, {5: "error"}, {5: KNOWN_ERROR})
    bad_stdout = good.output.stdout.replace('"index": 2,', '"index": 2, "surprise": 1,', 1)
    result = ScenarioResult.build(good.scenario, dataclasses.replace(good.output, stdout=bad_stdout), [])
    assert len(result.protocol_errors) == 1 and "'index': 2" in result.protocol_errors[0]
    assert result.steps[2].event is not None and result.steps[2].event["surprise"] == 1
    failures, missed = verdict(result, issue())
    assert [f.kind for f in failures] == ["error", "protocol"]
    assert "unknown field 'surprise'" in failures[1].message
    assert [f.kind for f in missed] == ["protocol"]


def test_the_pattern_is_matched_in_the_failing_steps_words_only(tmp_path):
    # The runtime said the known words at step 2 (a log line), but the step that failed is 5
    # and said something else: not the known issue.
    result = s1_run(tmp_path, {5: "error"}, {2: KNOWN_ERROR, 5: "E QnnManager: graph execute failed"})
    _, missed = verdict(result, issue())
    assert [(f.kind, f.step) for f in missed] == [("error", 5)]


def test_a_wrong_output_before_the_known_error_is_not_covered(tmp_path):
    result = s1_run(tmp_path, {2: "mismatch", 5: "error"}, {5: KNOWN_ERROR})
    failures, missed = verdict(result, issue())
    assert [(f.kind, f.step) for f in failures] == [("mismatch", 2), ("error", 5)]
    assert [(f.kind, f.step) for f in missed] == [("mismatch", 2)]


def test_outputs_that_differ_between_modules_are_a_mismatch(tmp_path):
    # Both executes "ok" by tolerance, but B's outputs differ from A's on the same program and
    # inputs: a wrong output the runner could not see.
    result = s1_run(tmp_path, {5: "error"}, {5: KNOWN_ERROR}, digests={3: "other"})
    _, missed = verdict(result, issue())
    assert [(f.kind, f.step) for f in missed] == [("mismatch", 3)]


def test_a_crash_after_the_known_error_is_not_covered(tmp_path):
    # SIGSEGV in destroy_module(B), after the known error at step 5.
    result = s1_run(tmp_path, {5: "error"}, {5: KNOWN_ERROR, 6: "Fatal signal 11"},
                    returncode=-11, last=5)
    failures, missed = verdict(result, issue())
    assert [(f.kind, f.step) for f in failures] == [("error", 5), ("crash", 6)]
    assert [f.kind for f in missed] == ["crash"]
    assert "runner crashed with signal SIGSEGV" in missed[0].message
    assert "destroy_module(B)" in missed[0].where


def test_a_known_crash_entry_does_not_cover_a_timeout(tmp_path):
    result = s1_run(tmp_path, {}, returncode=None, last=3)
    result.output.timed_out = True
    _, missed = verdict(result, issue(("crash",), "runner crashed"))
    assert [f.kind for f in missed] == ["timeout"]


def test_a_run_without_its_end_event_fails_every_assertion(tmp_path):
    # The runner exited 1 after reporting three steps, with no end event: the old Python runner
    # on a short input file. Whatever it reported looks fine; the run did not finish.
    result = s1_run(tmp_path, {}, returncode=1, last=2)
    assert result.failure_kind == "incomplete" and result.crashed
    for check in (assert_completed, assert_steps_ok, assert_isolation, assert_live_counts):
        with pytest.raises(AssertionError, match="without its end event") as exc:
            check(result)
        assert failure_of(exc.value).kind == "incomplete"
    assert "step in progress: execute(B.forward)" in result.crash_report()


def test_allowed_errors_are_not_failures(tmp_path):
    result = s1_run(tmp_path, {1: "error"}, {1: "E init failed"})
    assert [f.step for f in run_failures(result)] == [1]
    result.scenario.allowed_errors.add(1)
    assert run_failures(result) == []


def test_the_destroy_during_execute_entry_covers_each_way_the_race_ends_and_nothing_else():
    # The three ways the race was seen to end (crash; the destroy landing during A's execute;
    # A's execute done before it), in the runtime's words from CI runs, and an unrelated error.
    race = Path(PROJECT_ROOT / "tests" / "hil" / "test_concurrent_execute.py")
    entry = issue_for(race, "test_an_execute_racing_another_modules_load_and_destroy[linear_relu]",
                      "1.5.1", load_known_issues())
    assert entry is not None and entry.id == "qnn-delegate-cache-destroy-during-execute"
    free_in_progress = ("execute(forward) failed: Error::Internal (0x1)\n[INFO] [Qnn ExecuTorch]: "
                        "Destroy Qnn context\n[ERROR] [Qnn ExecuTorch]:  <E> Context with handle "
                        "0x1: free in progress\n[ERROR] [Qnn ExecuTorch]: qnn_graph_execute "
                        "failed. Error 6039")
    crash = ("runner crashed with signal SIGSEGV\ncrash site: SIGSEGV at fault address 0x20; frames: "
             "#0 libexecutorch_backend_qnn.so+0x20ef4 std::_Hashtable<...>::find+0x14 <- #1 "
             "libexecutorch_backend_qnn.so+0x21355 <- #4 libexecutorch.so+0x16741 "
             "executorch::runtime::Method::execute_instruction+0x771 <- #5 libexecutorch.so+0x184cc "
             "executorch::runtime::Method::execute+0x1ec")
    seen = [Failure("crash", crash),
            Failure("error", "execute(forward) failed: Error::Internal (0x1)\n" + KNOWN_ERROR),
            Failure("error", free_in_progress)]
    assert uncovered(entry, seen) == []
    other = Failure("error", "execute(forward) failed: Error::Internal (0x1)\n[ERROR] [Qnn "
                             "ExecuTorch]: qnn_graph_execute failed. Error 1002")
    assert uncovered(entry, [*seen, other]) == [other]


def test_bugs_are_counted_by_root_and_an_entry_id_resolves_to_its_reproduction():
    from harness.commands.bug_report import resolve_reproduction
    from harness.results.known_issues import defects

    issues = load_known_issues()
    bugs = [i for i in issues if i.is_bug]
    assert all(i.root for i in bugs)
    roots = defects([i.id for i in issues], issues)
    # the delegate cache's faces are one defect, not eleven
    assert len(roots["qnn-delegate-cache"]) >= 11 and len(roots) == len({i.root for i in bugs})
    assert sum(map(len, roots.values())) == len(bugs) > len(roots)
    assert resolve_reproduction("qnn-delegate-cache-forced-warm-hit", issues) == \
        "delegate-cache-module-lifetime"
    assert resolve_reproduction("qnn-init-failure-leaks-manager", issues) == \
        "init-failure-leaks-handles"
    assert resolve_reproduction("no-such-thing", issues) is None


def test_a_bug_entry_without_a_root_is_refused(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text(ENTRY.replace("where: design", "where: executorch\n  reproduce: r"))
    with pytest.raises(ConfigError, match="needs `root:`"):
        load_known_issues(path)


def test_a_defect_no_suite_meets_is_a_root_whose_entry_covers_no_test(tmp_path):
    """The XNNPACK backend's null data map: no suite loads a program with external data, so its
    entry names no test, yet it is a root of its own with a folder, which the fix model leaves."""
    from harness.commands.bug_report import REPRODUCTIONS, fixed_by_seed
    from harness.results.known_issues import defects

    issues = load_known_issues()
    entry = next(i for i in issues if i.id == "xnnpack-missing-external-data-crashes")
    assert entry.is_bug and entry.tests == () and entry.reproduce in REPRODUCTIONS
    assert defects([entry.id], issues) == {"xnnpack-null-named-data-map": [entry.id]}
    assert not fixed_by_seed(entry.reproduce, issues)
    assert issue_for(PROJECT_ROOT / "tests/hil/test_isolation.py",
                     "test_s1_two_modules_same_program[A-fp16]", "1.5.1", [entry]) is None
    path = tmp_path / "k.yaml"  # a design limit still names its tests
    path.write_text(ENTRY.replace("['t.py::x']", "[]"))
    with pytest.raises(ConfigError, match="tests: at least one pattern"):
        load_known_issues(path)


def test_an_entry_of_a_program_shape_covers_a_programs_tests_whatever_their_name(tmp_path):
    """`programs:` names program shapes (ProgramInfo.shapes): the entry covers any test of
    the project's suites run on a user's program of such a shape, and no other."""
    from harness.results.known_issues import issues_for, load_known_issues

    suite = ISOLATION
    entry = next(i for i in load_known_issues() if i.id == "qnn-mutable-buffer-initial-value")
    assert entry.programs == ("delegated-mutable-buffer",)
    name = "test_s4_cleanup_and_reload[mine]"
    assert issues_for(suite, name, "1.5.1", [entry]) == []
    assert issues_for(suite, name, "1.5.1", [entry], shapes=frozenset()) == []
    assert issues_for(suite, name, "1.5.1", [entry],
                      shapes=frozenset({"delegated-mutable-buffer"})) == [entry]
    assert issues_for(tmp_path / "test_mine.py", "test_x", "1.5.1", [entry],
                      shapes=frozenset({"delegated-mutable-buffer"})) == []
    bad = tmp_path / "issues.yaml"
    bad.write_text("- id: x\n  executorch: '1.5.1'\n  where: design\n  tests: ['t.py::t']\n"
                   "  kind: [error]\n  match: 'x'\n  reason: r\n  programs: [round-buffer]\n")
    with pytest.raises(ConfigError, match="unknown shape"):
        load_known_issues(bad)


def test_only_a_race_inside_one_qnn_call_is_intermittent():
    """A race between QNN calls can be forced at the QNN boundary (the interposer's rules), so
    its test meets it in every run and its entry is strict; only a race inside one QNN call,
    which no boundary point can order, may stay intermittent, and its entry says so; so may a
    data race seen only by helgrind, which any forcing lock would order (the entry says that)."""
    import re

    for issue in load_all([]):
        if issue.intermittent:
            assert re.search(r"race inside (?:one QNN call|that one call)|No rendezvous can force it",
                             issue.reason), (
                f"{issue.id} is intermittent but its reason does not say it is a race inside "
                "one QNN call: force it (harness/protocol/nemesis.py) and make it strict")


def test_the_delegate_cache_entry_covers_the_tests_of_a_two_method_program(tmp_path):
    """A program with two delegated methods sharing one context (inspect's
    two-delegated-methods) meets the delegate cache whenever one method is unloaded under the
    other: the entry covers any test of the project's suites run on such a program, by the
    runtime's own words, and no test of a one-method program it does not name."""
    from harness.results.failures import Failure
    from harness.results.known_issues import issues_for, load_known_issues

    entry = next(i for i in load_known_issues() if i.id == "qnn-delegate-cache-module-lifetime")
    assert "two-delegated-methods" in entry.programs
    suite = ISOLATION.with_name("test_soak.py")
    name = "test_soak_unload_each_method[multi_graphs]"
    assert entry not in issues_for(suite, name, "1.5.1", [entry], shapes=frozenset())
    assert issues_for(suite, name, "1.5.1", [entry],
                      shapes=frozenset({"two-delegated-methods"})) == [entry]
    assert entry.covers(Failure("error", "execute(prefill) failed: Error::Internal (0x1)\n"
                                "DelegateHandle has been deleted", "soak_unload"))
    assert not entry.covers(Failure("error", "execute(prefill) failed: Error::Internal (0x1)",
                                    "soak_unload"))
