"""The defects shown by valgrind, by the lowering API, by a program without its compile spec and
by an XNNPACK program without its external data (known issues
qnn-delegated-mutable-buffer-read-uninitialised, qnn-context-free-reads-freed-block-qairt-2.49,
qnn-delegate-maps-read-unlocked, qnn-spill-fill-size-last-program-only,
qnn-init-crashes-without-its-compile-spec, xnnpack-missing-external-data-crashes): their entries
apply where they can be met, and their standalone folders reproduce on executorch 1.5.1 (the
quick ones here; scripts/fresh_venv_check.py runs every folder in a fresh venv)."""

import json
import subprocess
import sys

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


def run_folder(tmp_path, repro: str) -> dict:
    out = tmp_path / repro
    proc = subprocess.run([sys.executable, "-m", "harness", "bug-report", repro, "--out",
                           str(out)], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"result": json.loads((out / "result.json").read_text()),
            "readme": (out / "README.md").read_text()}


def test_the_uninitialised_buffer_folder_reproduces_by_the_malloc_fill(tmp_path):
    """reproduce: the first output follows the bytes malloc left (fill 0x3f: 0.747 + 0.5, 0x40:
    3.004 + 0.5); control (the buffer held by the runtime): the initial state whatever the fill;
    reproduce --valgrind: memcheck's uninitialised values from the delegate's nothrow new[]."""
    folder = run_folder(tmp_path, "mutable-buffer-read-uninitialised")
    assert (folder["result"]["reproduce"], folder["result"]["control"]) == (1, 0)
    assert folder["result"]["also"] == 1
    readme = folder["readme"]
    assert "first output [1.2471, 1.2471" in readme and "first output [3.5039, 3.5039" in readme
    assert "first output [1.5, 1.5996" in readme  # the control's linspace(1, 2.5) + 0.5
    assert "operator new[](unsigned long, std::nothrow_t const&)" in readme
    assert "valgrind command" in readme


def test_the_spill_fill_folder_lowers_and_finds_prefill_without_the_size(tmp_path):
    folder = run_folder(tmp_path, "spill-fill-size-last-method-only")
    assert (folder["result"]["reproduce"], folder["result"]["control"]) == (1, 0)
    assert "prefill: [0]" in folder["readme"]


def test_the_missing_compile_spec_folder_crashes_under_init_and_its_control_runs(tmp_path):
    folder = run_folder(tmp_path, "delegate-without-compile-spec-crashes")
    assert (folder["result"]["reproduce"], folder["result"]["control"]) == (1, 0)
    assert "unknown argument: xnn_compile_spec" in folder["readme"]
    assert "BackendDelegate4Init" in folder["readme"]
    programs = json.loads((tmp_path / "delegate-without-compile-spec-crashes" /
                           "programs.json").read_text())
    assert [p.get("spec_renamed", False) for p in programs] == [False, True]


def test_the_missing_external_data_folder_crashes_in_xnnpack_and_its_control_runs(tmp_path):
    """reproduce: SIGSEGV in getConstantDataPtr under XNNCompiler::compileModel (the C++ Module's
    frames; the Python API dies at load_method too); control: both execute with the .ptd."""
    folder = run_folder(tmp_path, "xnnpack-missing-external-data-crashes")
    assert (folder["result"]["reproduce"], folder["result"]["control"]) == (1, 0)
    assert "18getConstantDataPtr" in folder["readme"]
    assert "XNNCompiler12compileModel" in folder["readme"]
