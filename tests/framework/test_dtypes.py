"""Every dtype a method's inputs and outputs may hold, through both runners: uint16, bfloat16,
float64, int16 and uint32 programs (tests/framework/dtype_programs.py) fed from `.npy` files,
their outputs checked against values computed here, integers compared exactly (an output off by
one is a mismatch however small the tolerance allows), and metadata methods' int and bool
outputs reported alike by both runners. With --pte, an input the suites cannot feed is one
usage error at start-up."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from harness.drive.driver import ScenarioDriver
from harness.programs.pte_reader import read_program
from harness.runner.select import choose_runner
from harness.scenario import Scenario
from harness.protocol.tensors import TensorFile, load_array, write_array
from harness.drive.solo import solo_scenario, with_reference
from harness.programs.user import inputs_dir, program_model

pytest_plugins = ["pytester"]
HERE = Path(__file__).resolve().parent
RUNNERS = ("native", "python")
U16 = np.array([[0, 1, 2], [3, 4, 65534]], dtype=np.uint16)
BF16 = np.array([[0.5, -1.25, 3.0], [100.0, -0.0078125, 7.5]], dtype=ml_dtypes.bfloat16)
F64 = np.array([1.0, -2.5, 1e-300, 3.0e10])
I16 = np.array([1, -2, 10000, -10000], dtype=np.int16)
U32 = np.array([[0, 1], [2**31, 2**32 - 1]], dtype=np.uint32)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dtype-programs")
    proc = subprocess.run([sys.executable, str(HERE / "dtype_programs.py"), str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    given = inputs_dir(out / "dtypes.pte")
    for method, arrays in {"u16": [U16], "bf16": [BF16], "f64_i16": [F64, I16],
                           "u32": [U32]}.items():
        (given / method).mkdir(parents=True)
        for i, array in enumerate(arrays):
            np.save(given / method / f"{i}.npy", array)
    return out


@pytest.fixture
def drivers(simulator_device, tmp_path):
    out = {}
    for kind in RUNNERS:
        choice = choose_runner(kind)
        assert choice.kind == kind, choice.notice
        out[kind] = ScenarioDriver(simulator_device(choice), tmp_path / kind, 300)
    return out


def all_ok(result) -> bool:
    return result.completed and all(s.ok for s in result.steps)


def expected_outputs() -> dict[str, list[np.ndarray]]:
    bf = BF16.astype(np.float32)
    return {"u16": [U16[1:]],
            "bf16": [(bf * 2 + 1).astype(ml_dtypes.bfloat16), bf],
            "f64_i16": [F64 * 0.5 - 1.0, I16 * np.int16(3)],
            "u32": [U32.reshape(4)]}


@pytest.mark.parametrize("runner", RUNNERS)
def test_every_dtype_through_the_runner(programs, drivers, runner, tmp_path):
    info = read_program(programs / "dtypes.pte")
    model = program_model(info, "SM8650", tmp_path / "work")
    solo = drivers[runner].run(solo_scenario(model))
    assert all_ok(solo), solo.summary()
    reference = with_reference(model, solo, tmp_path / "reference")
    for method, want in expected_outputs().items():
        got = [load_array(t) for t in reference.methods[method].expected]
        assert [g.dtype for g in got] == [w.dtype for w in want], method
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w, err_msg=method)
    sc = Scenario("dtypes").load_module("A", reference)
    for method in reference.methods:
        sc.execute("A", method).execute("A", method)
    result = drivers[runner].run(sc.destroy_module("A"))
    assert all_ok(result), result.summary()  # every execute matches the solo run


@pytest.mark.parametrize("runner", RUNNERS)
def test_integer_outputs_compare_exactly(programs, drivers, runner, tmp_path):
    """A uint16 output off by one in one element (65533 for 65534: a relative difference of
    1.5e-5, within the 1e-4 float tolerance) is a mismatch."""
    info = read_program(programs / "dtypes.pte")
    model = program_model(info, "SM8650", tmp_path / "work")
    solo = drivers[runner].run(solo_scenario(model))
    reference = with_reference(model, solo, tmp_path / "reference")
    good = reference.methods["u16"]
    wrong = U16[1:].copy()
    wrong[0, 2] -= 1
    bad = write_array(wrong, tmp_path / "wrong.bin")
    methods = dict(reference.methods)
    methods["u16"] = type(good)(good.inputs, (TensorFile(bad.dtype, bad.shape, bad.file),))
    tampered = type(reference)(**{**reference.__dict__, "methods": methods})
    sc = Scenario("off_by_one").load_module("A", tampered).execute("A", "u16")
    result = drivers[runner].run(sc.destroy_module("A"))
    assert result.steps[1].status == "mismatch", result.summary()
    assert result.steps[1].event["max_abs_diff"] == 1.0


def test_both_runners_report_the_same_outputs(programs, drivers, tmp_path):
    """Same digests and dtypes from both runners, metadata methods' int and bool included."""
    events = {}
    for kind in RUNNERS:
        steps = []
        for name in ("dtypes.pte", "metadata.pte"):
            model = program_model(read_program(programs / name), "SM8650", tmp_path / kind / name)
            result = drivers[kind].run(solo_scenario(model))
            assert all_ok(result), result.summary()
            steps += [[(o["dtype"], o["shape"], o["sha256"]) for o in s.event["outputs"]]
                      for s in result.steps if s.step.op == "execute"]
        events[kind] = steps
    assert events["native"] == events["python"]
    metadata = events["native"][-2:]
    assert [o[0][:2] for o in metadata] == [("int", []), ("boolean", [])]


def test_a_program_whose_inputs_cannot_be_fed_is_one_start_up_error(pytester, programs):
    """A given .npy of the wrong dtype: one usage error naming program, method, input and
    dtype, before any test runs (not a setup error per test)."""
    pte = shutil.copy(programs / "dtypes.pte", pytester.path / "dtypes.pte")
    shutil.copytree(inputs_dir(programs / "dtypes.pte"), inputs_dir(Path(pte)))
    np.save(inputs_dir(Path(pte)) / "u16" / "0.npy", U16.astype(np.int32))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hil-suites",
                                           f"--pte={pte}", timeout=600)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert text.count("int32[2, 3], but dtypes.pte method 'u16' input 0 is uint16[2, 3]") == 1, text
    assert "Traceback" not in text and "During handling" not in text, text


def test_a_bfloat16_run_exports_as_a_standalone_python_test(pytester, programs, tmp_path):
    """`harness export --format python` of S4 on the dtypes program (its first method takes and
    gives bfloat16): the standalone script reads the tensor files and passes."""
    pte = shutil.copy(programs / "dtypes.pte", pytester.path / "dtypes.pte")
    shutil.copytree(inputs_dir(programs / "dtypes.pte"), inputs_dir(Path(pte)))
    artifacts = tmp_path / "artifacts"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hil-suites", f"--pte={pte}",
                                           "-k", "s4", "--keep-artifacts",
                                           f"--artifacts-dir={artifacts}", timeout=600)
    result.assert_outcomes(passed=1)
    run_dir = next((artifacts / "latest").resolve().rglob("s4_cleanup_reload/scenario.json")).parent
    scenario = (run_dir / "scenario.json").read_text()
    assert '"bfloat16"' in scenario
    out = tmp_path / "export"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # The program is the user's and its inputs the session's: outside the run directory and
    # the cache, so export copies them only from directories named with --allow-dir.
    export = [sys.executable, "-m", "harness", "export", str(run_dir), "--format", "python"]
    proc = subprocess.run([*export, "--out", str(out)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2 and "--allow-dir DIR" in proc.stderr, proc.stdout + proc.stderr
    proc = subprocess.run([*export, "--out", str(out), "--allow-dir", str(pytester.path),
                           "--allow-dir", str(artifacts)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run(["bash", str(out / "run.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "outputs match the reference" in proc.stdout
