"""A user's own program and models, as a user brings them: a .pte exported by their own script
(docs/examples/export_program.py, a model that is not in models/), run through the shipped
suites with --pte, a model directory with --models-dir, and the hil_pte fixture in their own
test. Each runs pytest in a separate directory, as the user's project would."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np  # imported once: pytester's module snapshots cannot re-import numpy
import pytest

from harness.cache import cache_root
from harness.config.paths import SUITES_DIR
from harness.qnn.sdk import discover

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "docs" / "examples" / "export_program.py"
CACHE = cache_root()


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(CACHE))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """The example export script run as a user would, for SM8650 and SM8750."""
    out = tmp_path_factory.mktemp("export")
    env = {**os.environ, **discover().environment()}
    paths = {}
    for soc in ("SM8650", "SM8750"):
        path = out / f"gated_mlp_{soc.lower()}.pte"
        proc = subprocess.run([sys.executable, str(EXPORT), str(path), soc], env=env, cwd=out,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and path.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
        paths[soc] = path
    return paths


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rxs", *args, timeout=900)


def test_shipped_suites_on_a_users_program(pytester, exported):
    pte = shutil.copy(exported["SM8650"], pytester.path / "gated_mlp.pte")
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), str(SUITES_DIR / "test_multi_context.py"),
                 f"--pte={pte}")
    out = result.stdout.str()
    # S1 is the known issue, with the runtime's own words behind it; S4 passes.
    result.assert_outcomes(passed=1, xfailed=2, skipped=7)
    assert "XFAIL" in out and "test_s1_two_modules_same_program[gated_mlp-A]" in out
    assert "known issue qnn-delegate-cache-module-lifetime" in out
    # Suites that need two methods or a multi-context build say so.
    assert "test_s2_methods_share_one_context needs it" in out
    assert ("program gated_mlp (gated_mlp.pte) lacks two methods with QNN delegates" in out
            and "a build with use_multi_contexts" in out), out


def test_the_known_issue_shows_the_runtimes_words_when_not_excused(pytester, exported):
    pte = shutil.copy(exported["SM8650"], pytester.path / "gated_mlp.pte")
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), f"--pte={pte}",
                 "--ignore-known-issues", "-k", "s1 and gated_mlp-A")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*DelegateHandle has been deleted*"])


def test_a_program_for_another_soc_is_refused_naming_both(pytester, exported):
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), f"--pte={exported['SM8750']}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gated_mlp_sm8750.pte: compiled for SM8750*but the HTP "
                                 "simulator is SM8650*"])


@pytest.mark.parametrize("content, message", [
    (None, "*missing.pte: no such file*"),
    (b"not a program at all", "*not an ExecuTorch program*"),
])
def test_a_bad_program_path_is_one_clear_error(pytester, content, message):
    path = pytester.path / "missing.pte"
    if content is not None:
        path.write_bytes(content)
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), f"--pte={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "compile" not in result.stderr.str()  # no compile-cache hint for a user's file


OWN_TEST = """
import numpy as np
from harness.results.assertions import assert_steps_ok, assert_isolation
from harness.scenario import Scenario

def test_my_program(hil_pte, scenario_driver):
    model = hil_pte("gated_mlp.pte")
    assert list(model.methods) == ["forward"]
    assert model.methods["forward"].inputs[0].shape == (2, 24)
    given = np.load("gated_mlp.inputs/forward/0.npy")
    assert model.methods["forward"].inputs[0].file.read_bytes() == given.tobytes()
    sc = Scenario("mine").load_module("A", model).execute("A", "forward")
    sc.execute("A", "forward").destroy_module("A")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)  # both executes match the solo run's outputs
    assert_isolation(result)
"""


def test_own_test_with_hil_pte_and_given_inputs(pytester, exported):
    shutil.copy(exported["SM8650"], pytester.path / "gated_mlp.pte")
    inputs = pytester.path / "gated_mlp.inputs" / "forward"
    inputs.mkdir(parents=True)
    np.save(inputs / "0.npy", np.linspace(-1, 1, 48, dtype=np.float32).reshape(2, 24))
    pytester.makepyfile(test_mine=OWN_TEST)
    result = run(pytester)
    result.assert_outcomes(passed=1)


def test_given_inputs_of_the_wrong_shape_are_refused(pytester, exported):
    shutil.copy(exported["SM8650"], pytester.path / "gated_mlp.pte")
    inputs = pytester.path / "gated_mlp.inputs" / "forward"
    inputs.mkdir(parents=True)
    np.save(inputs / "0.npy", np.zeros((3, 24), dtype=np.float32))
    pytester.makepyfile(test_mine=OWN_TEST)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*0.npy: float32[[]3, 24[]], but gated_mlp.pte method 'forward' "
                                 "input 0 is float32[[]2, 24[]]*"])


MODEL_FILE = '''
"""A model of the user's own, in a --models-dir directory."""
NAME = "tiny_gate"
BACKEND = "qnn"
PRECISIONS = ("fp16",)
TOLERANCE = {"fp16": (0.02, 0.02)}


def build():
    import torch

    torch.manual_seed(1)

    class TinyGate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.sigmoid(self.a(x))

    return {"forward": (TinyGate().eval(), (torch.randn(1, 8),))}
'''

MODEL_TEST = """
from harness.results.assertions import assert_steps_ok
from harness.scenario.library import s4_cleanup_reload

def test_tiny_gate(compiled_model, scenario_driver):
    model = compiled_model("tiny_gate")
    assert model.name == "tiny_gate" and model.backend == "qnn"
    assert_steps_ok(scenario_driver.run(s4_cleanup_reload(model, 2)))
"""


def test_models_dir_adds_a_users_model(pytester):
    models = pytester.mkdir("my_models")
    (models / "tiny_gate.py").write_text(textwrap.dedent(MODEL_FILE))
    pytester.makepyfile(test_models=MODEL_TEST)
    result = run(pytester, f"--models-dir={models}")
    result.assert_outcomes(passed=1)
    missing = run(pytester)  # without the directory: a clear hint
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*unknown model 'tiny_gate'*--models-dir DIR*"])


FCB_REWRITE = Path(__file__).resolve().parent / "fcb_rewrite.py"


def fcb_program(source: Path, target: Path, socs: list[str]) -> Path:
    """`source` rewritten so that its QNN delegate names several SoCs (tests/framework/
    fcb_rewrite.py: one compile spec per SoC, as a program with contexts for several SoCs)."""
    env = {**os.environ, **discover().environment()}
    proc = subprocess.run([sys.executable, str(FCB_REWRITE), str(source), str(target), *socs],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return target


def test_a_program_for_several_socs_runs_where_the_device_is_among_them(pytester, exported):
    pte = fcb_program(exported["SM8650"], pytester.path / "gated_mlp_fcb.pte", ["SM8750", "SM8650"])
    proc = subprocess.run([sys.executable, "-m", "harness", "inspect", str(pte)],
                          capture_output=True, text=True, timeout=600)
    assert "QNN delegate of forward: SM8750, SM8650 (a context for each)" in proc.stdout, proc.stdout
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), f"--pte={pte}", "-k", "s1 or s4")
    result.assert_outcomes(passed=1, xfailed=2)


def test_a_program_for_several_other_socs_is_refused_naming_all(pytester, exported):
    pte = fcb_program(exported["SM8650"], pytester.path / "gated_mlp_fcb.pte", ["SM8550", "SM8750"])
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), f"--pte={pte}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gated_mlp_fcb.pte: compiled for SM8550, SM8750*but the HTP "
                                 "simulator is SM8650*an SM8550 or an SM8750 device*"])


CORPUS_BUILD = ROOT / "scripts" / "corpus" / "build.py"


def test_a_failing_solo_run_names_the_runtimes_words_and_the_inputs(pytester, tmp_path):
    """Upstream's index_select with a given index out of range: the solo run fails, and the
    one message says the runtime's own lines of that step and where the inputs came from."""
    env = {**os.environ, **discover().environment()}
    proc = subprocess.run([sys.executable, str(CORPUS_BUILD), str(tmp_path), "--only",
                           "index_select"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pte = shutil.copy(tmp_path / "index_select.pte", pytester.path / "index_select.pte")
    given = pytester.path / "index_select.inputs" / "forward"
    given.mkdir(parents=True)
    np.save(given / "0.npy", np.zeros((2, 3, 4, 5), dtype=np.float32))
    np.save(given / "1.npy", np.array([0, 7]))  # dimension 1 has 3 entries
    result = run(pytester, str(SUITES_DIR / "test_isolation.py"), f"--pte={pte}", "-k", "s4")
    result.assert_outcomes(errors=1)  # the program has no reference: the test cannot start
    text = result.stdout.str()
    assert "the solo run (one module, each method once, nothing else live) failed" in text
    assert "the runtime's log lines of that step:" in text
    assert "graph execute with error" in text, text[-3000:]
    assert f"its inputs were read from {pytester.path / 'index_select.inputs'}" in text
