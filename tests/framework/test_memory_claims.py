"""The defects shown by valgrind, by the lowering API, by a program without its compile spec and
by an XNNPACK program without its external data (known issues
qnn-delegated-mutable-buffer-read-uninitialised, qnn-context-free-reads-freed-block-qairt-2.49,
qnn-delegate-maps-read-unlocked, qnn-spill-fill-size-last-program-only,
qnn-init-crashes-without-its-compile-spec, xnnpack-missing-external-data-crashes): their entries
apply where they can be met. Their standalone folders are run as a user runs them by
tests/e2e/test_bug_report_folders.py (CI step 6c; step 6b, scripts/fresh_venv_check.py, runs
every folder in a fresh venv)."""

import pytest

from harness.commands.bug_report import REPRODUCTIONS, fixed_by_seed
from harness.results.known_issues import load_known_issues

NEW = {"qnn-delegated-mutable-buffer-read-uninitialised": "mutable-buffer-read-uninitialised",
       "qnn-context-free-reads-freed-block-qairt-2.49": "qnn-context-free-invalid-read",
       "qnn-delegate-maps-read-unlocked": "delegate-maps-read-unlocked"}


def issues():
    return {i.id: i for i in load_known_issues()}


@pytest.mark.unit
def test_each_valgrind_defect_is_a_root_of_its_own_with_a_folder():
    found = issues()
    roots = {found[i].root for i in NEW}
    assert len(roots) == 3 and "qnn-delegate-cache" not in roots
    for entry_id, repro in NEW.items():
        assert found[entry_id].is_bug and found[entry_id].reproduce == repro in REPRODUCTIONS
        assert found[entry_id].valgrind_only  # its tests pass unless run under --valgrind
        assert not fixed_by_seed(repro, list(found.values()))  # the fix model must leave it


@pytest.mark.unit
def test_the_qairt_249_read_is_keyed_by_the_qnn_version():
    entry = issues()["qnn-context-free-reads-freed-block-qairt-2.49"]
    assert entry.where == "qnn"
    assert entry.applies_to("1.5.1", "2.49.0.250923")
    assert not entry.applies_to("1.5.1", "2.51.0.251127")
    assert not entry.applies_to("1.5.1", None)


@pytest.mark.unit
def test_an_entry_of_valgrind_findings_alone_is_not_marked_without_valgrind():
    """Without --valgrind its tests pass: a strict xfail there would call that a fixed runtime,
    and an entry not applied is not stale either."""
    entry = issues()["qnn-delegate-maps-read-unlocked"]
    others = [i for i in load_known_issues() if i.valgrind_only]
    assert entry in others and all(set(i.kinds) == {"memory"} for i in others)
    assert not issues()["qnn-delegate-cache-module-lifetime"].valgrind_only
