"""From a failing ordering to an upstream bug report: a real pytest session on the simulator
leaves S1's run (DelegateHandle has been deleted on 1.5.1) and S4's (passing); `replay` runs
each again with the real runner, `export --format cpp|python|bundle` writes standalone tests
whose run.sh builds (CMake against the installed wheel) and runs them with the real
runtime, and each exits 1 on S1 with the runtime's words and 0 on S4. A run whose runner
started under a wrapper (fiu-run, setpriv: the XNNPACK cache suite's causes) replays and
exports under it again."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.runtime import executorch_version

ROOT = Path(__file__).resolve().parents[2]
WORDS = "DelegateHandle has been deleted"
S1_FAILS = executorch_version() == "1.5.1"  # the known issue's version


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _harness(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)


def _bash(script: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """S1 (destroy A first, fp16) as a plain failure and S4 (fp16), artifacts kept; their
    run directories and the session's output."""
    artifacts = tmp_path_factory.mktemp("artifacts")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-q", "-p",
         "no:cacheprovider", "-k", "fp16-A or (s4 and fp16)", "--ignore-known-issues",
         "--keep-artifacts", f"--artifacts-dir={artifacts}"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    session = (artifacts / "latest").resolve()
    found = {p.parent.name: p.parent for p in session.rglob("scenario.json")}
    assert {"s1_destroy_A", "s4_cleanup_reload"} <= set(found), proc.stdout + proc.stderr
    return {"s1": found["s1_destroy_A"], "s4": found["s4_cleanup_reload"], "output": proc.stdout}


def _exit_and_words(proc: subprocess.CompletedProcess, scenario: str) -> None:
    out = proc.stdout + proc.stderr
    if scenario == "s1" and S1_FAILS:
        assert proc.returncode == 1, out
        assert WORDS in out, out
    else:
        assert proc.returncode == 0, out


def test_a_failure_message_ends_with_its_replay_command(runs):
    if not S1_FAILS:
        pytest.skip(f"S1 passes on executorch {executorch_version()}")
    commands = re.findall(r"^replay: (python -m harness replay .*)$", runs["output"], re.M)
    assert commands == [f"python -m harness replay {runs['s1']} --simulator"], runs["output"]


def test_an_xfail_reason_ends_with_its_replay_command(tmp_path):
    if not S1_FAILS:
        pytest.skip(f"S1 passes on executorch {executorch_version()}")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-q", "-rx", "-p",
         "no:cacheprovider", "-k", "s1 and fp16-A", f"--artifacts-dir={tmp_path}"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    xfail = next(l for l in proc.stdout.splitlines() if l.startswith("XFAIL "))
    run_dir = next((tmp_path / "latest").resolve().glob("*/s1_destroy_A"))
    assert xfail.endswith(f"; replay: python -m harness replay {run_dir} --simulator"), xfail


def test_replay_fails_again_at_the_recorded_step(runs):
    proc = _harness("replay", str(runs["s1"]), "--simulator")
    _exit_and_words(proc, "s1")
    if S1_FAILS:
        assert "recorded: step 5 execute(B.forward)" in proc.stdout, proc.stdout
        assert "first failing step: 5 execute(B.forward), the same step as recorded" in proc.stdout
        # The test stopped at its first check; the others are shown, and do not decide.
        assert "the test checked: steps\n" in proc.stdout
        assert "FAILED isolation (not one its test made of this run)" in proc.stdout
        assert "FAILED live counts (not one its test made of this run)" in proc.stdout


def test_replay_with_the_python_runner(runs):
    proc = _harness("replay", str(runs["s1"]), "--runner", "python")
    _exit_and_words(proc, "s1")
    assert "runner python" in proc.stdout
    if S1_FAILS:
        assert "first failing step: 5 execute(B.forward), the same step as recorded" in proc.stdout


def test_replay_of_a_passing_run_holds_every_check_each_time(runs):
    proc = _harness("replay", str(runs["s4"]), "--runs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The test's own checks, recorded when it ended; its memory checks are not redone.
    assert "the test checked: steps, live counts, memory, htp memory, dsp heap; not redone: " \
           "memory, htp memory, dsp heap" in proc.stdout, proc.stdout
    assert proc.stdout.count("every check holds: steps, outputs, isolation, live counts") == 2
    assert "0 of 2 run(s) failed a check" in proc.stdout


@pytest.mark.parametrize("fmt", ["cpp", "python"])
@pytest.mark.parametrize("scenario", ["s1", "s4"])
def test_an_export_reproduces_the_verdict_standalone(runs, tmp_path, fmt, scenario):
    out = tmp_path / fmt
    proc = _harness("export", str(runs[scenario]), "--format", fmt, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    source = next(out.glob("test_*.cpp" if fmt == "cpp" else "test_*.py")).read_text()
    name = runs[scenario].name
    assert f"Scenario: {name}" in source and "Ordering: load_module(A), load_module(B)" in source
    run = _bash(out / "run.sh", cwd=tmp_path)  # from another directory: run.sh finds its own
    _exit_and_words(run, scenario)
    if scenario == "s1" and S1_FAILS:
        assert "FAILED step 5 execute(B.forward)" in run.stdout, run.stdout
    if fmt == "cpp":
        assert (out / "build" / f"test_{name}").is_file()  # built with CMake here
        assert "warning" not in (out / "build.log").read_text()  # -Wall -Wextra, as the runner
    elif scenario == "s4":  # RUNS=N: new processes, each with its own trace
        again = subprocess.run(["bash", str(out / "run.sh")], env={**_env(), "RUNS": "2"},
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0 and "2 run(s) passed" in again.stdout, again.stdout
        assert again.stdout.count("every check held") == 2


@pytest.mark.parametrize("scenario", ["s1", "s4"])
def test_a_bundle_unpacks_and_its_readme_command_reproduces(runs, tmp_path, scenario):
    proc = _harness("export", str(runs[scenario]), "--format", "bundle", "--out", str(tmp_path / "b"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    archive = next((tmp_path / "b").glob("*.tar.gz"))
    assert archive.stat().st_size < 200_000  # small enough to attach to an issue
    with tarfile.open(archive) as tar:
        readme = tar.extractfile(f"{archive.name[:-7]}/README.md").read().decode()
    command = re.search(r"^(tar xzf .*?)\s+#", readme, re.M).group(1)
    work = tmp_path / "unpacked"
    work.mkdir()
    (work / archive.name).write_bytes(archive.read_bytes())
    run = subprocess.run(["bash", "-c", command], cwd=work, env=_env(), capture_output=True,
                         text=True, timeout=600)
    _exit_and_words(run, scenario)
    root = work / archive.name[:-7]
    env = json.loads((root / "environment.json").read_text())
    assert env["executorch"] == executorch_version() and env["soc"] == "SM8650"
    assert env["qnn"]["core_api"] and env["device"]["kind"] == "simulator"
    for name in ("scenario.json", "qnn_trace.txt", "runtime.log", "replay.json"):
        assert (root / name).stat().st_size > 0, name
    # The unpacked scenario replays by itself (its paths are the bundle's own).
    _exit_and_words(_harness("replay", str(root / "scenario.json")), scenario)


def test_a_large_program_is_referenced_by_sha256(runs, tmp_path):
    proc = _harness("export", str(runs["s4"]), "--format", "bundle", "--out", str(tmp_path),
                    "--max-program-mb", "0.001")
    assert proc.returncode == 0, proc.stderr
    archive = next(tmp_path.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        listed = json.loads(tar.extractfile(f"{archive.name[:-7]}/programs.json").read())
    assert not [n for n in names if n.endswith(".pte")], names
    assert len(listed) == 1 and len(listed[0]["sha256"]) == 64 and listed[0]["size"] > 1000


def test_replay_warns_of_a_scratch_file_that_is_gone(runs, tmp_path):
    """A weight cache the recorded session made in its scratch directory is gone with it."""
    cache = tmp_path / "gone" / "xnn.cache"
    run = _edited_run(runs["s4"], tmp_path / "run", lambda steps: steps)
    doc = json.loads((run / "scenario.json").read_text())
    doc["watch_mappings"] = [str(cache)]
    (run / "scenario.json").write_text(json.dumps(doc))
    proc = _harness("replay", str(run))
    assert f"warning: the scenario names {cache}, which no longer exists" in proc.stdout


def test_bad_input_is_one_error_with_exit_2(runs, tmp_path):
    missing = _harness("replay", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no such run directory" in missing.stderr
    assert "Traceback" not in missing.stderr
    empty = _harness("export", str(tmp_path), "--format", "cpp", "--out", str(tmp_path / "o"))
    assert empty.returncode == 2 and "no scenario.json here" in empty.stderr
    # Backend options are not expressed by the standalone exports (replay runs them).
    run = _edited_run(runs["s4"], tmp_path / "options", lambda steps: [
        {**steps[0], "backend_options": {"XnnpackBackend": {"weight_cache_enabled": True}}},
        *steps[1:]])
    refused = _harness("export", str(run), "--format", "python", "--out", str(tmp_path / "p"))
    assert refused.returncode == 2 and "step 0 load_module(A) has backend options" in refused.stderr
    assert "Traceback" not in refused.stderr


def _edited_run(source: Path, run: Path, edit) -> Path:
    """A run directory whose scenario is `source`'s with its steps edited (no run record: the
    backend is read from the program)."""
    run.mkdir()
    doc = json.loads((source / "scenario.json").read_text())
    doc["steps"] = edit(doc["steps"])
    (run / "scenario.json").write_text(json.dumps(doc))
    return run


@pytest.mark.parametrize("fmt", ["cpp", "python"])
def test_a_parallel_step_runs_on_threads_released_together(runs, tmp_path, fmt):
    """S1 with both modules' executes again at once (warm: each has its method loaded) before
    the destroy: the export runs them on two threads and still fails at the execute after it."""
    run = _edited_run(runs["s1"], tmp_path / "run", lambda steps: [
        *steps[:4], {"op": "parallel", "steps": [steps[2], steps[3]]}, *steps[4:]])
    out = tmp_path / fmt
    proc = _harness("export", str(run), "--format", fmt, "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    source = next(out.glob("test_*")).read_text()
    assert "parallel(" in source
    result = _bash(out / "run.sh")
    _exit_and_words(result, "s1")
    step4 = result.stdout.split("step 4 parallel(execute(A.forward) | execute(B.forward))\n")[1]
    assert step4.split("step 5 ")[0].count("outputs match the reference") == 2, result.stdout
    if S1_FAILS:
        assert "FAILED step 6 execute(B.forward)" in result.stdout, result.stdout


# A branch driven by a launch cause (harness.runner.launch): the XNNPACK cache suite's
# ftruncate(0) failing under libfiu's fiu-run and open(O_CREAT) refused to root without its
# permission-bypassing capabilities (setpriv). The run records the wrapper; replay starts the
# runner under it again, so the runtime takes the same branch with the same errno.
CAUSES = {"x1_1_ftruncate0": ("fiu-run", "truncate0_failed 5 (EIO)"),
          "x1_1_eacces1": ("setpriv", "open_failed 13 (EACCES)")}


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """The XNNPACK branch suite's fiu-run (ftruncate(0)) and setpriv (EACCES) tests, artifacts
    kept; their first launch's run directory by scenario name."""
    if os.geteuid() != 0:
        pytest.skip("the EACCES branch needs root without its capabilities (setpriv)")
    artifacts = tmp_path_factory.mktemp("xnn-artifacts")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/hil/test_xnnpack_branches.py", "-q", "-p",
         "no:cacheprovider", "-k", "ftruncate_zero or eacces", "--keep-artifacts",
         f"--artifacts-dir={artifacts}"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    found = {p.parent.name: p.parent for p in (artifacts / "latest").resolve().rglob(
        "scenario.json")}
    if "skipped" in proc.stdout and not set(CAUSES) <= set(found):
        pytest.skip(f"the branch suite skipped: {proc.stdout[-300:]}")
    assert proc.returncode == 0 and set(CAUSES) <= set(found), proc.stdout + proc.stderr
    return found


@pytest.fixture
def cache_dir(request):
    """cache_dir(run): the recorded cache file's directory, made again as the recorded session
    had it (the scratch directory went with its session: the cause is the launch, not the
    directory), and removed at teardown with the parents it made."""
    import shutil

    made: list[Path] = []

    def make(run: Path) -> Path:
        doc = json.loads((run / "scenario.json").read_text())
        load = next(s for s in doc["steps"] if s["op"] == "load_module")
        directory = Path(load["backend_options"]["XnnpackBackend"]["packed_cache_path"]).parent
        top = next((p for p in reversed(directory.parents) if not p.exists()), None)
        made.append(top if top is not None else directory)
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("scenario", list(CAUSES))
def test_replay_of_a_launch_caused_branch_takes_it_again(launched, tmp_path, cache_dir, scenario):
    from harness.results.xnnpack_log import failures

    tool, branch = CAUSES[scenario]
    run = launched[scenario]
    record = json.loads((run / "replay.json").read_text())
    assert [l["tool"] for l in record.get("launch", [])] == [tool], record.get("launch")
    recorded = failures((run / "runner.stderr").read_text().splitlines())
    assert recorded == [branch], recorded
    directory = cache_dir(run)
    for leftover in directory.iterdir():  # a replay starts from the recorded (empty) state
        leftover.unlink()
    if tool == "setpriv":
        os.chown(directory, 65534, 65534)  # nobody's, as the test made it
        directory.chmod(0o755)
    proc = _harness("replay", str(run), "--artifacts-dir", str(tmp_path / "replayed"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"launched under: {tool} " in out, out
    assert f"xnnpack cache branches: {branch}: the same as recorded" in out, out
    replayed = next((tmp_path / "replayed").rglob("runner.stderr"))
    assert failures(replayed.read_text().splitlines()) == recorded
    if tool == "setpriv":
        assert not list(directory.iterdir())  # root did not write it


def test_replay_says_a_branch_the_recorded_cause_did_not_give(launched, tmp_path, cache_dir):
    """The same fiu-run record without its launch (the record as it was before launches were
    recorded): replay runs the runner plainly, the runtime writes the file, and replay says
    the branch is not the recorded one."""
    source = launched["x1_1_ftruncate0"]
    run = tmp_path / "run"
    run.mkdir()
    for name in ("scenario.json", "runner.stderr", "result.json"):
        (run / name).write_bytes((source / name).read_bytes())
    record = json.loads((source / "replay.json").read_text())
    record.pop("launch")
    (run / "replay.json").write_text(json.dumps(record))
    directory = cache_dir(run)
    for leftover in directory.iterdir():
        leftover.unlink()
    proc = _harness("replay", str(run), "--artifacts-dir", str(tmp_path / "replayed"))
    assert "launched under" not in proc.stdout, proc.stdout
    assert "xnnpack cache branches: none: NOT the recorded ones (truncate0_failed 5 (EIO))" \
        in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("fmt", ["cpp", "python"])
def test_an_export_runs_the_test_under_the_recorded_cause(runs, tmp_path, fmt):
    """S4 (passing) recorded with a setpriv launch (root without its permission capabilities),
    its export's data in a directory only `nobody` may read: the exported test, started under
    setpriv by run.sh, cannot read its program and fails; the export of the run without the
    launch reads it (root) and passes. The cause is in the export's command, not the data."""
    if os.geteuid() != 0:
        pytest.skip("root drops capabilities here")
    import shutil

    launched_run = tmp_path / "run"
    shutil.copytree(runs["s4"], launched_run)
    record = json.loads((launched_run / "replay.json").read_text())
    record["launch"] = [{"tool": "setpriv", "args": [
        "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]}]
    (launched_run / "replay.json").write_text(json.dumps(record))
    verdicts = {}
    for name, run in (("launched", launched_run), ("plain", runs["s4"])):
        out = tmp_path / f"{fmt}-{name}"
        proc = _harness("export", str(run), "--format", fmt, "--out", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        os.chown(out / "data", 65534, 65534)
        (out / "data").chmod(0o700)
        verdicts[name] = _bash(out / "run.sh", cwd=tmp_path)
    launched, plain = verdicts["launched"], verdicts["plain"]
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert launched.returncode == 1, launched.stdout + launched.stderr
    assert "FAILED step 0 load_module(A)" in launched.stdout, launched.stdout
