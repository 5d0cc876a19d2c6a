"""What `harness export`, `replay` and `bug-report` may read and where they may write.

A run directory is data: one crafted or tampered with must not carry a file of the user's into
a bundle for a public issue or onto a device. Each route that copies or pushes a run's files
(export as cpp, python and bundle; replay --device) refuses, with one error naming the path and
nothing written, an input `file` of `../secret/...` or an absolute path, and `runner.stderr`,
`runner.stdout`, `qnn_trace.txt` or `result.json` replaced by a symbolic link. The run
directories are made by hand (a `portable` program of a few bytes), so nothing here needs a
runtime; a good one exports, which shows the refusals are the check's.

Every `--out` that is not a usable directory (a regular file, a path through a file, a name
longer than the filesystem takes) is one usage error (exit 2) naming the option, before any
work and with no traceback; matrix and mutate, whose `--out` a later run reuses, refuse the
same paths.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def harness(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def bad_outs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of --out that is no usable directory, with the words its error says."""
    file = tmp_path / "report.txt"
    file.write_text("not a directory\n")
    return {"file": (file, "is a regular file, not a directory"),
            "through a file": (file / "sub", "a part of the path is a file"),
            "5000-byte name": (tmp_path / ("o" * 5000), "name too long for the filesystem")}


COMMANDS = {
    "export": ["export", "no-such-run", "--format", "bundle"],
    "bug-report": ["bug-report", "delegate-cache-module-lifetime", "--no-run"],
    "matrix": ["matrix", "--executorch", "1.5.1"],
    "mutate": ["mutate", "--mutant", "no-such-mutant-either"],
}


@pytest.mark.parametrize("command", ["export", "bug-report"])
def test_an_out_that_is_no_directory_is_a_usage_error_of_the_cli(tmp_path, command):
    """As a user meets it: exit 2, the option and the path named, no traceback."""
    for kind, (out, words) in bad_outs(tmp_path).items():
        proc = harness(*COMMANDS[command], "--out", str(out))
        text = proc.stdout + proc.stderr
        assert proc.returncode == 2, (kind, text)
        assert f"error: --out {str(out)[:40]}" in proc.stderr and words in proc.stderr, text
        assert "Traceback" not in text, text
        assert len(proc.stderr) < 600, text  # a 5000-byte name is shortened
    assert (tmp_path / "report.txt").read_text() == "not a directory\n"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_out_option_refuses_a_path_that_is_no_directory(tmp_path, capsys, command):
    """Each command's main, in this process: 2 before any work (no venv, no compile, no run)."""
    from harness.__main__ import main

    for kind, (out, words) in bad_outs(tmp_path).items():
        assert main([*COMMANDS[command], "--out", str(out)]) == 2, kind
        err = capsys.readouterr().err
        assert "--out" in err and words in err, (kind, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]


def test_a_usable_out_directory(tmp_path):
    from harness.storage import unusable_out_dir

    assert unusable_out_dir(tmp_path / "new" / "deeper") == ""
    assert unusable_out_dir(tmp_path) == ""  # empty
    (tmp_path / "x").write_text("")
    assert unusable_out_dir(tmp_path) == f"--out {tmp_path} exists and is not empty"
    assert unusable_out_dir(tmp_path, empty=False) == ""  # matrix, mutate: reused


SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- fake"
RECORDED = ("runner.stderr", "runner.stdout", "qnn_trace.txt", "result.json")


def make_run(root: Path, input_file: str = "in.bin") -> Path:
    """A run directory as the driver leaves it, by hand: a program, one input and one expected
    output, the run record and the recorded files; `input_file` as scenario.json names it."""
    run = root / "run"
    run.mkdir(parents=True)
    (run / "p.pte").write_bytes(b"program")
    (run / "in.bin").write_bytes(bytes(len(SECRET)))
    (run / "out.bin").write_bytes(bytes(4))
    doc = {"version": 1, "name": "s", "steps": [
        {"op": "load_module", "module": "A", "pte": "p.pte"},
        {"op": "execute", "module": "A", "method": "forward",
         "inputs": [{"dtype": "uint8", "shape": [len(SECRET)], "file": input_file}],
         "expected": [{"dtype": "float32", "shape": [1], "file": "out.bin"}]},
        {"op": "destroy_module", "module": "A"}]}
    (run / "scenario.json").write_text(json.dumps(doc))
    (run / "replay.json").write_text(json.dumps({"models": {"A": {"backend": "portable"}}}))
    for name in RECORDED:
        (run / name).write_text("{}" if name == "result.json" else "")
    return run


def secret(root: Path) -> Path:
    path = root / "secret" / "id_fake_key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(SECRET)
    return path


def crafted(tmp_path: Path, case: str) -> tuple[Path, Path]:
    """(run directory, the path its error must name) for each way out of the run."""
    key = secret(tmp_path)
    if case == "dotdot":
        run = make_run(tmp_path, "../secret/id_fake_key")
        return run, run / "../secret/id_fake_key"
    if case == "absolute":
        return make_run(tmp_path, str(key)), key
    run = make_run(tmp_path)
    (run / case).unlink()
    (run / case).symlink_to(key)
    return run, run / case


CASES = ["dotdot", "absolute", *RECORDED]
ROUTES = ["cpp", "python", "bundle", "replay --device"]


def route(name: str, run: Path, out: Path, *extra: str) -> list[str]:
    if name == "replay --device":
        return ["replay", str(run), "--device", "emulator-5554", "--artifacts-dir", str(out),
                *extra]
    return ["export", str(run), "--format", name, "--out", str(out), *extra]


@pytest.fixture
def no_device(monkeypatch):
    """replay must refuse before it opens a device: opening one here is the test failing."""
    import harness.replay

    def refuse(*args, **kwargs):
        raise AssertionError("replay opened a session for a run it should have refused")

    monkeypatch.setattr(harness.replay, "open_session", refuse)


def assert_nothing_leaked(tmp_path: Path, out: Path) -> None:
    assert not out.exists(), sorted(out.rglob("*"))
    for path in tmp_path.rglob("*"):  # nothing anywhere holds the secret but the secret
        if path.is_file() and not path.is_symlink() and path.name != "id_fake_key":
            assert SECRET not in path.read_bytes(), path


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ROUTES)
def test_each_route_refuses_a_file_from_outside_the_run(tmp_path, capsys, no_device, name, case):
    from harness.__main__ import main

    run, named = crafted(tmp_path, case)
    out = tmp_path / "out"
    assert main(route(name, run, out)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: refused {named}"), err
    why = "a symbolic link" if case in RECORDED else "outside those directories"
    assert why in err and "only regular files inside the run directory" in err, err
    assert err.count("\n") == 1, err  # one line
    assert_nothing_leaked(tmp_path, out)


@pytest.mark.parametrize("name", ["bundle", "replay --device"])
def test_a_refusal_is_one_usage_error_of_the_cli(tmp_path, name):
    run, named = crafted(tmp_path, "runner.stderr")
    proc = harness(*route(name, run, tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"error: refused {named}: a symbolic link (to {tmp_path / 'secret'}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert_nothing_leaked(tmp_path, tmp_path / "out")


@pytest.mark.parametrize("fmt", ["cpp", "python", "bundle"])
def test_a_run_of_its_own_files_exports(tmp_path, capsys, fmt):
    from harness.export import main

    assert main(["export", str(make_run(tmp_path)), "--format", fmt,
                 "--out", str(tmp_path / "out")][1:]) == 0, capsys.readouterr().err
    assert any((tmp_path / "out").iterdir())


def test_allow_dir_admits_a_directory_of_the_users_own_but_never_a_link(tmp_path, capsys):
    """A program of one's own (--pte) and its session's inputs lie outside the run and the
    cache: --allow-dir names them; a symbolic link stays refused inside an allowed directory."""
    from harness.export import main

    key = secret(tmp_path)
    run = make_run(tmp_path, str(key))
    assert main([str(run), "--format", "python", "--out", str(tmp_path / "o1")]) == 2
    assert "--allow-dir DIR" in capsys.readouterr().err
    assert main([str(run), "--format", "python", "--out", str(tmp_path / "o2"),
                 "--allow-dir", str(key.parent)]) == 0
    (run / "qnn_trace.txt").unlink()
    (run / "qnn_trace.txt").symlink_to(key)
    assert main([str(run), "--format", "python", "--out", str(tmp_path / "o3"),
                 "--allow-dir", str(key.parent)]) == 2
    assert "qnn_trace.txt: a symbolic link" in capsys.readouterr().err
    assert not (tmp_path / "o3").exists()


def test_a_link_that_stays_inside_a_fifo_and_a_linked_scenario_are_refused(tmp_path):
    from harness.errors import UnsafeFileError
    from harness.replay import load_run

    run = make_run(tmp_path)
    (run / "runner.stdout").unlink()
    (run / "runner.stdout").symlink_to(run / "runner.stderr")  # inside: still a link
    with pytest.raises(UnsafeFileError, match=re.escape("runner.stdout: a symbolic link")):
        load_run(run, confine=[])
    (run / "runner.stdout").unlink()
    os.mkfifo(run / "runner.stdout")  # refused unread: no wait for a writer
    with pytest.raises(UnsafeFileError, match=re.escape("runner.stdout: not a regular file")):
        load_run(run, confine=[])
    (run / "runner.stdout").unlink()
    elsewhere = make_run(tmp_path / "other")
    (run / "scenario.json").unlink()
    (run / "scenario.json").symlink_to(elsewhere / "scenario.json")
    with pytest.raises(UnsafeFileError, match=re.escape("scenario.json: a symbolic link")):
        load_run(run, confine=[])
    assert load_run(run).directory == elsewhere  # unconfined (replay on the simulator): read


def test_bug_report_copies_only_from_its_reproductions_and_the_cache(tmp_path, monkeypatch):
    """A compiled program that is not the cache's (a link planted in the cache, or a path
    elsewhere) is refused before the folder holds it."""
    import harness.programs.compile
    import harness.programs.models
    import harness.qnn.sdk
    from types import SimpleNamespace

    from harness.commands.bug_report import REPRODUCTIONS, write_folder
    from harness.config.paths import MODELS_DIR
    from harness.errors import UnsafeFileError

    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(cache))
    key = secret(tmp_path)
    planted = cache / "model.pte"
    planted.symlink_to(key)
    for pte, why in ((key, "outside those directories"), (planted, "a symbolic link")):
        model = type("Model", (), {"pte": pte, "methods": {}})()
        monkeypatch.setattr(harness.qnn.sdk, "discover", lambda: None)
        monkeypatch.setattr(harness.programs.models, "get_model",
                            lambda name: SimpleNamespace(path=MODELS_DIR / f"{name}.py"))
        monkeypatch.setattr(harness.programs.compile, "compile_model",
                            lambda *args, model=model, **kwargs: model)
        out = tmp_path / f"out-{pte.name}"
        with pytest.raises(UnsafeFileError, match=re.escape(f"refused {pte}: {why}")):
            write_folder(REPRODUCTIONS["delegate-cache-module-lifetime"], out, tmp_path)
        assert not (out / "programs").exists()
    assert_nothing_leaked(tmp_path, tmp_path / "never")


# A launch cause (harness.runner.launch) is the run's data: every export says it, quoted.
def launched_run(tmp_path: Path, launch: list[dict]) -> Path:
    run = make_run(tmp_path)
    (run / "replay.json").write_text(json.dumps({"models": {"A": {"backend": "portable"}},
                                                 "launch": launch}))
    return run


def causes(tmp_path: Path) -> list[dict]:
    """setpriv, then fiu-run with a command a shell would run if it were not quoted."""
    evil = f"enable name=posix/io/oc/open,failinfo=13 $(touch {tmp_path}/pwned) 'x"
    return [{"tool": "setpriv", "args": ["--bounding-set", "-dac_override", "--"]},
            {"tool": "fiu-run", "args": ["-x", "-f", "", "-c", evil]}]


def words(launch: list[dict]) -> list[str]:
    return [w for record in launch for w in (record["tool"], *record["args"])]


def bash_words(line: str) -> list[str]:
    """The words bash makes of run.sh's `LAUNCH=(...)` line."""
    proc = subprocess.run(["bash", "-c", line + '\nprintf "%s\\0" "${LAUNCH[@]}"'],
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("fmt", ["cpp", "python", "bundle"])
def test_an_export_starts_the_test_under_the_recorded_cause(tmp_path, capsys, fmt):
    import shlex
    import tarfile

    from harness.export import main

    launch = causes(tmp_path)
    out = tmp_path / "out"
    assert main([str(launched_run(tmp_path, launch)), "--format", fmt, "--out", str(out)]) \
        == 0, capsys.readouterr().err
    if fmt == "bundle":
        with tarfile.open(next(out.glob("*.tar.gz"))) as tar:
            tar.extractall(out, filter="data")
        out = out / "hil-s"
        readme = (out / "README.md").read_text()
        assert f"{shlex.join(words(launch))} cpp/build/test_s data" in readme, readme
        assert "`util-linux` (`setpriv`), `fiu-utils` (`fiu-run`)" in readme, readme
        assert json.loads((out / "replay.json").read_text())["launch"] == launch
        scripts = [out / "cpp" / "run.sh", out / "python" / "run.sh"]
    else:
        readme = (out / "README.md").read_text()
        command = "build/test_s data" if fmt == "cpp" else "python3 -u test_s.py data"
        assert f"{shlex.join(words(launch))} {command}" in readme, readme
        scripts = [out / "run.sh"]
    for script in scripts:
        text = script.read_text()
        line = next(l for l in text.splitlines()
                    if l.startswith("LAUNCH=(") and not l.startswith("LAUNCH=()"))
        assert bash_words(line) == words(launch), line
        assert 'command -v fiu-run >/dev/null || { echo' in text and "fiu-utils" in text
        assert '${LAUNCH[@]+"${LAUNCH[@]}"} "$@"' in text  # repeat starts the test under it
    assert not (tmp_path / "pwned").exists()


def test_run_sh_without_the_tool_stops_naming_the_package(tmp_path, capsys):
    """run.sh on a host without fiu-run: exit 2 and one line naming fiu-utils, before the
    test runs."""
    from harness.export import main

    launch = causes(tmp_path)[1:]
    out = tmp_path / "out"
    assert main([str(launched_run(tmp_path, launch)), "--format", "python", "--out",
                 str(out)]) == 0, capsys.readouterr().err
    bin_dir = tmp_path / "bin"  # only what run.sh needs before the launch check
    bin_dir.mkdir()
    for tool in ("dirname", "seq"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    proc = subprocess.run(["/bin/bash", str(out / "run.sh")], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir), "QNN_SDK_ROOT": "/nowhere",
                                           "PYTHON": sys.executable})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Debian package fiu-utils" in proc.stderr, \
        proc.stderr
    assert "run(s) passed" not in proc.stdout


def test_replay_without_the_tool_is_one_error_naming_the_package(tmp_path, capsys, no_device,
                                                               monkeypatch):
    from harness.__main__ import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["replay", str(launched_run(tmp_path, causes(tmp_path)[1:]))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the scenario's runner starts under fiu-run (fiu-run -x -f")
    assert "install the Debian package fiu-utils" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("record", [{"tool": "sh", "args": ["-c", "id"]},
                                    {"tool": "setpriv", "args": "--bounding-set"}])
def test_a_launch_record_of_no_known_wrapper_is_refused(tmp_path, capsys, no_device, record):
    from harness.__main__ import main

    run = launched_run(tmp_path, [record])
    for argv in (["replay", str(run)], ["export", str(run), "--format", "cpp", "--out",
                                        str(tmp_path / "out")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {run / 'replay.json'}: ") and err.count("\n") == 1, err
        assert "not one of fiu-run, setpriv" in err or "a launch record is" in err, err
    assert not (tmp_path / "out").exists()
