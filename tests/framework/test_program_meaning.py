"""User programs judged by what they mean (tests/framework/stateful_programs.py exports them):
no FAIL where the runtime's outputs are what the program means, none passing where they are
not. Each run is pytest in a separate directory, as the user's project would run it; the fault
sweep judges their failure paths whatever their outputs.

- A buffer held by the runtime with no initial value serialized (exported without
  InitializedMutableBufferPass): its start is undefined, so the runtime's zero start is right;
  the solo run is judged against the ETRecord's edge program from a zero start, and the
  suites judge how the state advances, not the ETRecord's start. A runtime variant whose
  executes stop advancing the state fails them.
- A buffer inside the QNN delegate that the runtime never initialises (upstream's CausalMask):
  the solo run, made twice with the heap filled differently, differs, so it is no reference;
  each test says so once (the program's finding), never calling the runtime's later, right
  outputs wrong.
- Two buffers inside the delegate (a running mean): each execute since a load gets its own
  input, so a second Module continuing the first's state shows.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cache import cache_root
from harness.config.paths import SUITES_DIR
from harness.qnn.sdk import discover

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
EXPORT = Path(__file__).with_name("stateful_programs.py")
STATEFUL = str(SUITES_DIR / "test_stateful.py")
ISOLATION = str(SUITES_DIR / "test_isolation.py")


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(cache_root()))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this tree's harness in the session


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("programs")
    env = {**os.environ, **discover().environment()}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, str(EXPORT), str(out)], env=env, cwd=out,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rxXs", "-n", "0", *args,
                                         timeout=900)


def _copy(programs: Path, name: str, where: Path) -> Path:
    pte = Path(shutil.copy(programs / f"{name}.pte", where / f"{name}.pte"))
    record = programs / f"{name}.etrecord"
    if record.is_file():
        shutil.copy(record, pte.with_suffix(".etrecord"))
    return pte


def test_an_undefined_start_is_not_failed(pytester, programs):
    """The runtime gives the undefined start zero and advances it as the program says: the
    stateful suite and S4 pass (they failed against the ETRecord's start of ones), and the
    session says once that the program needs the initializing pass."""
    pte = _copy(programs, "acc_cpu_nopass", pytester.path)
    result = run(pytester, STATEFUL, ISOLATION, f"--pte={pte}", "-k",
                 "not s1 and not s2 and not s3")
    result.assert_outcomes(passed=5, skipped=4)
    out = result.stdout.str()
    assert out.count("export it with InitializedMutableBufferPass") == 1, out
    assert "its solo run gives what its edge program gives with the undefined buffer(s)" in out


def test_an_undefined_start_still_fails_a_state_that_stops_advancing(pytester, programs,
                                                                     monkeypatch):
    """The same program on a runtime whose executes return the previous output from the
    second on (a mutant at the backend boundary): every stateful test fails."""
    monkeypatch.setenv("EXECUTORCH_HIL_RUNTIME_VARIANT", "stock")
    monkeypatch.setenv("HARNESS_RUNTIME_MUTANT", "output_stale:nth=2")
    pte = _copy(programs, "acc_cpu_nopass", pytester.path)
    result = run(pytester, STATEFUL, f"--pte={pte}", "-k", "not control")
    result.assert_outcomes(failed=4)
    assert "its solo run (one module, nothing else live) disagrees with the ETRecord" in \
        result.stdout.str()


def test_the_initialized_program_passes_against_its_etrecord(pytester, programs):
    """Control: with the pass the start is the ones, and the runtime holds it."""
    pte = _copy(programs, "acc_cpu_pass", pytester.path)
    result = run(pytester, STATEFUL, ISOLATION, f"--pte={pte}", "-k",
                 "not s1 and not s2 and not s3")
    result.assert_outcomes(passed=5, skipped=4)
    assert "InitializedMutableBufferPass" not in result.stdout.str()


def test_an_uninitialised_delegated_buffer_is_the_programs_finding(pytester, programs):
    """CausalMask's delegated buffer is never initialised: its two solo runs differ, the
    session says which elements and which buffer, and every test that executes it fails
    with that finding once, not with a mismatch against garbage."""
    pte = _copy(programs, "causal_mask", pytester.path)
    result = run(pytester, STATEFUL, ISOLATION, f"--pte={pte}", "-k",
                 "not s1 and not s2 and not s3", "--ignore-known-issues")
    result.assert_outcomes(failed=5, skipped=4)
    out = result.stdout.str()
    assert "the program's solo run read uninitialised memory in method 'forward'" in out
    assert "mutable buffer b_causal_mask of forward: inside the QnnBackend delegate" in out
    assert "outputs differ from the reference beyond tolerance" not in out, out
    assert "max abs diff 131007" not in out


def test_a_second_module_continuing_the_first_ones_state_fails_by_name(pytester, programs):
    """mean_delegated, a running mean of two buffers inside the delegate: from a zero start
    its output is the input, whatever came before, so with one input every execute a second
    Module continuing the first's state passed the separate-states check. Each execute since
    a load now gets its own input: the check fails with its words, and the known issue of a
    buffer shared across Modules names the test (its mismatches named as that state)."""
    pte = _copy(programs, "mean_delegated", pytester.path)
    which = "(second_module or alternating) and not control"
    result = run(pytester, STATEFUL, f"--pte={pte}", "-k", which, "--ignore-known-issues")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "modules A and B do not each start from the program's initial state and keep " \
           "their own" in out, out
    result = run(pytester, STATEFUL, f"--pte={pte}", "-k", which)
    result.assert_outcomes(xfailed=2)
    assert "qnn-mutable-buffer-shared-across-modules" in result.stdout.str()


@pytest.mark.parametrize("name", ["causal_mask", "acc_delegated"])
def test_the_fault_sweep_judges_failure_paths_of_a_program_wrong_anyway(pytester, programs,
                                                                         name):
    """The sweep holds each injected run to the same scenario's run with nothing injected:
    a program whose outputs are wrong (acc_delegated against its ETRecord) or have no usable
    reference (causal_mask) still gets its failure-path verdicts, as a correct one does
    (they failed on the no-injection run's outputs before)."""
    pte = _copy(programs, name, pytester.path)
    sweep = str(SUITES_DIR / "test_fault_sweep.py")
    result = run(pytester, sweep, f"--pte={pte}", "-k",
                 "program and (QnnGraph_execute or QnnContext_free or QnnDevice_create)")
    # Passes; both programs have a buffer inside a QNN delegate, whose known issue covers
    # their tests by that shape alone: a test that does not meet the defect is a PASS.
    result.assert_outcomes(passed=3)


def test_the_known_issue_of_the_programs_shape_covers_its_tests(pytester, programs):
    """qnn-mutable-buffer-initial-value names the shape (a buffer inside a QNN delegate): it
    covers every suite's test of such a --pte program, whatever the test is called, and S1
    lists both the delegate cache's error and the finding before it."""
    pte = _copy(programs, "causal_mask", pytester.path)
    result = run(pytester, STATEFUL, ISOLATION, f"--pte={pte}")
    result.assert_outcomes(xfailed=7, skipped=7)
    out = result.stdout.str()
    assert "test_isolation.py::test_s4_cleanup_and_reload[causal_mask] - known issue " \
           "qnn-mutable-buffer-initial-value" in out, out
    assert "test_s1_two_modules_same_program[causal_mask-A] - known issue " \
           "qnn-delegate-cache-module-lifetime (or qnn-mutable-buffer-initial-value" in out, out


def test_a_wrong_output_before_the_known_error_fails_s1_and_lists_both(pytester, programs,
                                                                       monkeypatch):
    """The README's rule on a user's program: the runtime's first execute returns one element
    off by 0.25 (a mutant at the backend boundary), then S1 meets the delegate cache's known
    error. Against the program's meaning (its ETRecord) the wrong output is seen, so both S1
    cases FAIL, each listing the mismatch as not covered and the known error as covered."""
    monkeypatch.setenv("EXECUTORCH_HIL_RUNTIME_VARIANT", "stock")
    monkeypatch.setenv("HARNESS_RUNTIME_MUTANT", "output_perturb:nth=1")
    pte = _copy(programs, "acc_cpu_pass", pytester.path)
    result = run(pytester, ISOLATION, f"--pte={pte}", "-k", "s1")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    for first, second in (("A", "B"), ("B", "A")):
        assert (f"not covered mismatch in scenario s1_destroy_{first} step 2 "
                "execute(A.forward): outputs differ from the reference") in out, out
        assert (f"covered     error in scenario s1_destroy_{first} step 5 "
                f"execute({second}.forward)") in out, out
    assert "DelegateHandle has been deleted" in out
