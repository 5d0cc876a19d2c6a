"""Runtime variants at the backend registry (`--runtime-variant`, harness/runtime/variants.py):
the stock wrapper changes no verdict, the model of the seed's fix turns the delegate-cache
entry into XPASS(strict) and is named in the header and results.json, a forced interleaving the
serialized model cannot make is judged on what ran, and a bad variant is one usage error."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cache import cache_root

REPO = Path(__file__).resolve().parents[2]
ISOLATION = REPO / "tests" / "hil" / "test_isolation.py"


def session(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-n", "0", "-rA",
         f"--hil-report={out}", f"--artifacts-dir={tmp_path / 'artifacts'}"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**__import__("os").environ, "EXECUTORCH_HIL_CACHE": str(cache_root())})
    results = out / "results.json"
    assert results.is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads(results.read_text())


def verdicts(doc: dict) -> dict[str, tuple[str, bool]]:
    return {t["nodeid"]: (t["outcome"], bool(t.get("xpass_strict"))) for t in doc["tests"]}


def test_stock_changes_nothing_and_the_fix_model_fixes_exactly_the_delegate_cache(tmp_path):
    pick = ("-k", "fp16 and (s1 or s2 or s4)")
    _, plain = session(tmp_path, "none", str(ISOLATION), *pick)
    proc, stock = session(tmp_path, "stock", str(ISOLATION), *pick, "--runtime-variant=stock")
    assert verdicts(stock) == verdicts(plain)
    assert "runtime variant stock" in proc.stdout
    assert stock["environment"]["runtime"]["variant"] == "stock"

    proc, fix = session(tmp_path, "fix", str(ISOLATION), *pick, "--runtime-variant=fix-model")
    assert fix["environment"]["runtime"]["variant"] == "fix-model"
    for nodeid, (outcome, strict) in verdicts(fix).items():
        before = verdicts(plain)[nodeid]
        if "test_s1_" in nodeid:
            assert before == ("xfailed", False), (nodeid, before)
            assert (outcome, strict) == ("failed", True), (nodeid, outcome)  # XPASS(strict)
        else:
            assert (outcome, strict) == before, nodeid
    assert "XPASS(strict)" in proc.stdout


def test_an_unreachable_forced_interleaving_is_judged_on_what_ran(tmp_path):
    """The serialized fix model keeps B's destroy out of A's running execute, so the rule that
    holds A inside QnnGraph_execute until B's destroy returned can never be met: the test must
    not blame the runtime for that, and must say which rule and why."""
    proc, doc = session(
        tmp_path, "serialized",
        "tests/hil/test_concurrent_execute.py::test_forced_destroy_during_execute"
        "[destroy_before_graph_execute]", "--runtime-variant=fix-model-serialized")
    (test,) = doc["tests"]
    # The delegate-cache entry of this ending no longer fails: its XPASS(strict), not a
    # failure of the rule.
    assert test["outcome"] == "failed" and test["xpass_strict"], test["message"]
    said = [r["unreachable_rendezvous"] for r in doc["runs"] if r["unreachable_rendezvous"]]
    assert said and "only after it went on" in said[0][0], doc["runs"]
    assert "forced interleaving unreachable on this runtime" in proc.stdout


def test_an_unknown_variant_is_one_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", str(ISOLATION), "-p",
                           "no:cacheprovider", "--runtime-variant=fixed"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert "--runtime-variant must be one of none, stock, fix-model" in proc.stderr


def test_a_variant_on_a_device_of_another_build_is_one_clear_error(monkeypatch):
    from pathlib import PurePosixPath

    from harness.runtime.variants import ENV, VariantError, device_preload

    monkeypatch.setenv(ENV, "fix-model")
    with pytest.raises(VariantError, match=r"phone 1234 runs the android runner build.*arm64-linux"):
        device_preload(PurePosixPath("/data/local/tmp/ws"), "android", "phone 1234")
    # a build with a cross-built wrapper (arm64-linux) gets it, with the variant to read
    built = Path("/cache/libharness_registry_wrapper.so")
    files, env = device_preload(PurePosixPath("/ws"), "arm64-linux", "board", lambda: built)
    assert files == {built: PurePosixPath("/ws/libharness_registry_wrapper.so")}
    assert env["LD_PRELOAD"] == "/ws/libharness_registry_wrapper.so"
    assert env["HARNESS_RUNTIME_VARIANT"] == "fix-model"
    monkeypatch.setenv(ENV, "none")
    assert device_preload(PurePosixPath("/data/local/tmp/ws"), "android", "phone 1234") == ({}, {})


def test_mutate_in_a_session_kills_a_defect_and_fails_below_its_floor(tmp_path):
    """`--mutate`: the session is the unmutated run, each mutant a pass of its own; a wrong
    output is killed (exit 0 at floor 1), a mutant the session's tests cannot reach scores
    nothing and fails the floor (exit 1); the table is in the summary, the page and results.json."""
    pick = ("-k", "s1 and fp16", "--runtime-variant=stock", "--mutate-floor=1.0")
    proc, doc = session(tmp_path, "killed", str(ISOLATION), *pick,
                        "--mutate=output-perturbed-every-execute")
    assert proc.returncode == 0, proc.stdout[-3000:]
    (mutant,) = doc["mutation"]["mutants"]
    assert mutant["verdict"] == "killed" and "test_s1_" in mutant["killed_by"][0], mutant
    assert "score 100%: 1 killed" in proc.stdout
    assert "Mutation score 100% on stock" in (tmp_path / "killed" / "report.html").read_text()

    proc, doc = session(tmp_path, "unreached", str(ISOLATION), *pick,
                        "--mutate=xnnpack-output-perturbed")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert doc["mutation"]["not_reached"] == 1 and doc["mutation"]["score"] == 0.0


@pytest.mark.parametrize("args, words", [
    (("--runtime-variant=stock", "--mutate=2"), "--mutate needs --hil-report"),
    (("--mutate=2", "--hil-report=REPORT"), "--mutate needs --runtime-variant"),
    (("--runtime-variant=stock", "--hil-report=REPORT", "--mutate=no-such-mutant"),
     "no mutant no-such-mutant in the catalogue"),
])
def test_mutate_refuses_what_it_cannot_run(tmp_path, args, words):
    args = tuple(a.replace("REPORT", str(tmp_path / "r")) for a in args)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(ISOLATION), "-p",
                           "no:cacheprovider", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert words in proc.stderr
