"""Programs whose inputs and outputs are not memory-planned (upstream's QNN LLM flow lowers with
`MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)`): `inspect` says so, and
both runners bind buffers of their own, so every execute gives the eager outputs, as a fixed
program or as a user's `--pte` (solo run, then its own reference)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.programs.pte_reader import read_program
from harness.drive.solo import solo_scenario, with_reference
from harness.programs.user import program_model
from harness.runner.select import choose_runner
from harness.scenario import Scenario
from harness.drive.driver import ScenarioDriver

RUNNERS = ("native", "python")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def programs(hil_session):
    """prefill_decode built twice: with planned I/O (the default) and without."""
    return {kind: hil_session.model("prefill_decode", "fp16", options)
            for kind, options in (("planned", None), ("unplanned", {"unplanned_io": True}))}


def driver(simulator_device, runner, where):
    choice = choose_runner(runner)
    assert choice.kind == runner, choice.notice
    return ScenarioDriver(simulator_device(choice), where, 300)


def test_inspect_says_which_inputs_and_outputs_are_planned(programs):
    unplanned = read_program(programs["unplanned"].pte)
    planned = read_program(programs["planned"].pte)
    for name, method in unplanned.methods.items():
        assert method.unplanned_inputs == tuple(range(len(method.inputs))), name
        assert method.unplanned_outputs == tuple(range(len(method.outputs))), name
        assert "inputs not planned, outputs not planned" in method.planning_text()
    for method in planned.methods.values():
        assert not method.unplanned_inputs and not method.unplanned_outputs
        assert method.planning_text() == "inputs planned, outputs planned"
    text = subprocess.run([sys.executable, "-m", "harness", "inspect", "--json",
                           str(programs["unplanned"].pte)], capture_output=True, text=True,
                          timeout=300)
    assert text.returncode == 0, text.stderr[-2000:]
    doc = json.loads(text.stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    outputs = doc["methods"]["decode"]["outputs"]
    assert [o["planned"] for o in outputs] == [False] * len(outputs)


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_runner_binds_its_own_output_buffers(programs, simulator_device, runner, tmp_path):
    """Every execute of both methods, across an unload and a destroy + reload, gives the eager
    outputs: the buffers are bound before every execute and freed with their method."""
    model = programs["unplanned"]
    sc = Scenario("unplanned").load_module("A", model)
    sc.execute("A", "prefill").execute("A", "decode").execute("A", "decode")
    sc.unload_method("A", "decode").execute("A", "decode").destroy_module("A")
    sc.load_module("A", model).execute("A", "decode").execute("A", "prefill").destroy_module("A")
    result = driver(simulator_device, runner, tmp_path).run(sc)
    assert result.completed and all(s.ok for s in result.steps), result.summary()
    executes = [s for s in result.steps if s.step.op == "execute"]
    assert len(executes) == 6 and all(s.event["outputs"] for s in executes)


@pytest.mark.parametrize("runner", RUNNERS)
def test_an_unplanned_program_given_as_pte_gets_its_reference(programs, simulator_device,
                                                               runner, tmp_path):
    """The user-program path (--pte): the solo run that makes the reference succeeds, and a
    second module's run matches it, so the suites start instead of ending in a setup error."""
    info = read_program(programs["unplanned"].pte)
    model = program_model(info, "SM8650", tmp_path / "work")
    run = driver(simulator_device, runner, tmp_path / "runs")
    solo = run.run(solo_scenario(model))
    assert solo.completed and all(s.ok for s in solo.steps), solo.summary()
    reference = with_reference(model, solo, tmp_path / "reference")
    sc = Scenario("again").load_module("B", reference)
    for method in reference.methods:
        sc.execute("B", method)
    result = run.run(sc.destroy_module("B"))
    assert result.completed and all(s.ok for s in result.steps), result.summary()


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_replay_and_a_cpp_export_bind_the_outputs_too(programs, simulator_device, tmp_path):
    """A run on the unplanned program replays, and its standalone C++ export (built with CMake
    here) binds the outputs as the runner does: both pass every check."""
    model = programs["unplanned"]
    # (No unload of one method while the other stays: that is the delegate-cache bug, S3.)
    sc = Scenario("unplanned_export").load_module("A", model).execute("A", "prefill")
    sc.execute("A", "decode").destroy_module("A").load_module("A", model).execute("A", "decode")
    result = driver(simulator_device, "native", tmp_path / "runs").run(sc.destroy_module("A"))
    assert result.completed and all(s.ok for s in result.steps), result.summary()
    run_dir = result.artifacts
    replay = subprocess.run([sys.executable, "-m", "harness", "replay", str(run_dir),
                             "--simulator"], env=_clean_env(), capture_output=True, text=True,
                            timeout=600)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    out = tmp_path / "cpp"
    export = subprocess.run([sys.executable, "-m", "harness", "export", str(run_dir), "--format",
                             "cpp", "--out", str(out)], env=_clean_env(), capture_output=True,
                            text=True, timeout=600)
    assert export.returncode == 0, export.stdout + export.stderr
    run = subprocess.run(["bash", str(out / "run.sh")], env=_clean_env(), capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_fed_input_takes_the_previous_outputs_not_its_file(programs, simulator_device, runner,
                                                             tmp_path):
    """The decode loop in order passes every step; skipping a step (decode's 2nd loop step fed
    prefill's state, while its file holds eager's 1st-step state) is a mismatch, which it could
    not be if the runner read the file; a feed with no earlier execute is a step error."""
    from harness.scenario.library import decode_loop, decode_step

    model = programs["unplanned"]
    loop = model.decode_loop
    run = driver(simulator_device, runner, tmp_path)
    good = run.run(decode_loop(Scenario("loop").load_module("A", model), "A", model)
                   .destroy_module("A"))
    assert good.completed and all(s.ok for s in good.steps), good.summary()
    export = subprocess.run([sys.executable, "-m", "harness", "export", str(good.artifacts),
                             "--format", "python", "--out", str(tmp_path / "export")],
                            env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert export.returncode != 0 and "a feed (outputs passed back as inputs)" in \
        export.stdout + export.stderr, export.stdout + export.stderr
    skipped = Scenario("skipped").load_module("A", model).execute("A", loop["after"])
    bad = run.run(decode_step(skipped, "A", model, 1).destroy_module("A"))
    assert bad.steps[2].status == "mismatch", bad.summary()
    first = decode_step(Scenario("nothing_to_feed").load_module("A", model), "A", model, 0)
    first.allow_error()
    none = run.run(first.destroy_module("A"))
    assert none.steps[1].status == "error", none.summary()
    assert "feed: module 'A' has no output 0 of an earlier execute" in none.steps[1].event["message"]
