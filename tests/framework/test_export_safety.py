"""What `harness export`, `replay` and `bug-report` may read and where they may write.

Every `--out` that is not a usable directory (a regular file, a path through a file, a name
longer than the filesystem takes) is one usage error (exit 2) naming the option, before any
work and with no traceback; matrix and mutate, whose `--out` a later run reuses, refuse the
same paths.
"""

from __future__ import annotations

import os
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
