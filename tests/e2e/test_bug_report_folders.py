"""The standalone folders of the defects shown by valgrind, by the lowering API, by a program
without its compile spec and by an XNNPACK program without its external data (known issues
qnn-delegated-mutable-buffer-read-uninitialised, qnn-spill-fill-size-last-program-only,
qnn-init-crashes-without-its-compile-spec, xnnpack-missing-external-data-crashes), made and run
as a user runs them (`python -m harness bug-report ID --out DIR`): each reproduces on executorch
1.5.1 with the defect's own signature, and its control runs. CI step 6c runs this file; step
6b (scripts/fresh_venv_check.py) runs every folder's reproduce and control again in a fresh
venv; the entries themselves are tests/framework/test_memory_claims.py's."""

import json
import subprocess
import sys


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
