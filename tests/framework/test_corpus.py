"""The corpus step's verdicts (scripts/corpus/run.py): what it reads from the suite's JUnit
report and which outcomes fail the step. The step itself runs in CI (.ci/run, "corpus")."""

import importlib.util
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "scripts" / "corpus" / "run.py"
spec = importlib.util.spec_from_file_location("corpus_run", RUN)
corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(corpus)

CASES = {
    "test_s1_two_modules_same_program[{p}-A]": '<skipped type="pytest.xfail" message="known issue"/>',
    "test_s1_two_modules_same_program[{p}-B]": '<skipped type="pytest.xfail" message="known issue"/>',
    "test_s2_methods_share_one_context[{p}]": "",
    "test_s3_unload_one_method_keeps_the_other[{p}-first]": '<skipped type="pytest.xfail" message="x"/>',
    "test_s3_unload_one_method_keeps_the_other[{p}-second]": '<skipped type="pytest.xfail" message="x"/>',
    "test_s4_cleanup_and_reload[{p}]": "",
}
LOOP_CASES = {  # an LLM export's; any other program's are skips
    "test_decode_loop_feeds_each_steps_outputs_to_the_next[{p}]": "",
    "test_decode_loop_after_destroy_and_reload_starts_over[{p}]": "",
    "test_decode_loop_on_two_modules_of_one_program[{p}]": '<skipped type="pytest.xfail" message="x"/>',
}
NO_LOOP = '<skipped type="pytest.skip" message="lacks a decode loop"/>'
LLM = ("llm_hybrid",)


def junit(tmp_path, programs: dict[str, dict[str, str]], llm=LLM) -> Path:
    """A JUnit XML (xunit1 shape) with, per program, the default outcomes above overridden."""
    cases = []
    for program, overrides in programs.items():
        loop = {k: v if program in llm else NO_LOOP for k, v in LOOP_CASES.items()}
        for name, body in {**CASES, **loop}.items():
            body = overrides.get(name.format(p=program), body)
            cases.append(f'<testcase classname="t" name="{name.format(p=program)}">{body}</testcase>')
    path = tmp_path / "junit.xml"
    path.write_text(f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>")
    return path


QUANT_ATTR = ["double", "int", "int", "int", "string"]  # upstream's get_kv_output_N_quant_attr


def manifest(*names, two=(), unplanned=("llm_hybrid", "conv"), values=("llm_hybrid", "conv"),
             llm=LLM):
    return {n: {"kind": "k", "precision": "fp16", "eager_refuses_inputs": "",
                "methods": ["kv_forward", "prefill_forward"] if n in llm else ["forward"],
                "delegated": ["a", "b"] if n in two else ["forward"],
                "unplanned_io": ["a"] if n in unplanned else [],
                "value_outputs": {"get_kv_output_0_quant_attr": QUANT_ATTR} if n in values
                else {}} for n in names}


def test_outcomes_per_program_and_column(tmp_path):
    table = corpus.outcomes(junit(tmp_path, {"llm_hybrid": {}, "multi-dash": {}}))
    assert table["llm_hybrid"]["S1-A"][0] == "XFAIL"
    assert table["llm_hybrid"]["S2"] == ("PASS", "")
    assert set(table["multi-dash"]) == set(corpus.COLUMNS)  # a stem with a dash stays whole
    assert corpus.problems(table, manifest("llm_hybrid", "multi-dash",
                                           two=("llm_hybrid", "multi-dash"))) == []


def test_what_fails_the_step(tmp_path):
    skip = '<skipped type="pytest.skip" message="lacks two methods"/>'
    table = corpus.outcomes(junit(tmp_path, {
        "conv": {"test_s2_methods_share_one_context[conv]": skip,
                 "test_s3_unload_one_method_keeps_the_other[conv-first]": skip,
                 "test_s3_unload_one_method_keeps_the_other[conv-second]": skip},
        "fixed": {"test_s1_two_modules_same_program[fixed-A]": ""},
        "broken": {"test_s4_cleanup_and_reload[broken]": '<error message="setup failed"/>'},
        "pair": {"test_s2_methods_share_one_context[pair]": skip},
    }))
    facts = manifest("conv", "fixed", "broken", "pair", "missing", two=("pair",))
    facts["conv"]["eager_refuses_inputs"] = "forward: IndexError: index 6 is out of bounds"
    found = corpus.problems(table, facts)
    assert any(p.startswith("conv: eager PyTorch refuses") for p in found)
    assert not any(p.startswith("conv S") for p in found)  # one method: S2/S3 skips are fine
    assert "fixed S1-A: PASS, expected XFAIL" in found
    assert "broken S4: ERROR: setup failed" in found
    assert any(p.startswith("pair S2: SKIP") for p in found)
    assert "missing: no test ran" in found
    assert [p for p in found if p.startswith("no program of the corpus ran its decode loop")]
    assert len(found) == 7, found
    assert "conv" in corpus.render(table, facts).splitlines()[2]


def test_a_corpus_without_an_unplanned_io_program_fails_the_step(tmp_path):
    table = corpus.outcomes(junit(tmp_path, {"llm_hybrid": {}}))
    planned = manifest("llm_hybrid", two=("llm_hybrid",), unplanned=())
    assert [p for p in corpus.problems(table, planned) if "unplanned" in p]
    assert corpus.problems(table, manifest("llm_hybrid", two=("llm_hybrid",))) == []
    assert "unplanned" in corpus.render(table, manifest("llm_hybrid")).splitlines()[2]


def test_a_corpus_without_a_non_tensor_output_fails_the_step(tmp_path):
    table = corpus.outcomes(junit(tmp_path, {"llm_hybrid": {}}))
    tensors_only = manifest("llm_hybrid", two=("llm_hybrid",), values=())
    assert [p for p in corpus.problems(table, tensors_only) if "non-tensor output" in p]
    no_string = manifest("llm_hybrid", two=("llm_hybrid",))
    no_string["llm_hybrid"]["value_outputs"] = {"get_use_kv_cache": ["bool"]}
    assert [p for p in corpus.problems(table, no_string) if "string output" in p] == [
        "no program of the corpus has a string output (only bool; upstream's "
        "get_kv_output_N_quant_attr returns one)"]


def test_an_llm_exports_decode_loop_must_pass_and_no_other_program_has_one(tmp_path):
    """An LLM export's loop passes on one module and after a reload, and its two modules'
    loops are the delegate-cache XFAIL; another program's loop tests are skips."""
    table = corpus.outcomes(junit(tmp_path, {
        "llm_hybrid": {"test_decode_loop_after_destroy_and_reload_starts_over[llm_hybrid]":
                       '<failure message="step 12 mismatch"/>',
                       "test_decode_loop_on_two_modules_of_one_program[llm_hybrid]": ""},
        "conv": {"test_decode_loop_feeds_each_steps_outputs_to_the_next[conv]": ""}}))
    found = corpus.problems(table, manifest("llm_hybrid", "conv", two=("llm_hybrid",)))
    assert sorted(found) == sorted([
        "llm_hybrid loop-reload: FAIL: step 12 mismatch",
        "llm_hybrid loop-2mod: PASS, expected XFAIL",
        "conv loop: PASS: a program without kv_forward has no decode loop to run"]), found
    skipped = corpus.outcomes(junit(tmp_path, {"llm_hybrid": {
        "test_decode_loop_feeds_each_steps_outputs_to_the_next[llm_hybrid]": NO_LOOP}}))
    found = corpus.problems(skipped, manifest("llm_hybrid", two=("llm_hybrid",)))
    assert "llm_hybrid loop: SKIP (lacks a decode loop)" in found
    assert [p for p in found if p.startswith("no program of the corpus ran its decode loop")]
