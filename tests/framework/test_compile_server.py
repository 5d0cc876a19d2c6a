"""Compiles forked from a server that has the lowering stack imported
(harness/programs/compile_server.py) give what a new `compile_worker` process gives: the same
reference tensors and program layout, the same failure with the model's own words; and a
compile that fails or exits never takes the server down for the next one."""

from __future__ import annotations

import filecmp
import json
import os
import re
from pathlib import Path

import pytest

from harness.errors import ModelError
from harness.programs.compile import compile_model
from harness.programs.models import get_model
from harness.qnn.sdk import discover

BROKEN = '''NAME = "broken"
BACKEND = "qnn"
PRECISIONS = ("fp16",)
TOLERANCE = {}


def build():
    raise RuntimeError("this model cannot be built: weights file missing")
'''

# A model whose build says, in its error, which process forked it and what it was given.
ECHO = '''import os

NAME = "echo"
BACKEND = "qnn"
PRECISIONS = ("fp16",)
TOLERANCE = {}


def build():
    raise RuntimeError("forked by %d, cache %s, test %s" % (
        os.getppid(), os.environ.get("EXECUTORCH_HIL_CACHE"),
        os.environ.get("PYTEST_CURRENT_TEST", "none")))
'''


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("server", ["1", "0"])
def test_a_model_that_fails_to_build_is_a_model_error_in_its_own_words(
        server, cache, tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_COMPILE_SERVER", server)
    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.py").write_text(BROKEN)
    spec = get_model("broken", models)
    for _ in range(2):  # the server survives a failed compile and serves the next
        with pytest.raises(ModelError) as err:
            compile_model(spec, "SM8650", "fp16", discover())
        assert "compiling broken for SM8650 fp16 failed (exit 1)" in str(err.value)
        assert "weights file missing" in str(err.value)


def test_one_server_serves_every_test_each_with_its_own_name(cache, tmp_path, monkeypatch):
    """pytest's PYTEST_CURRENT_TEST, new for every test, does not start a server each (every
    compiling test did, about 6 s of CPU apiece); the child still sees its own request's value, and
    without the variable, none."""
    monkeypatch.setenv("EXECUTORCH_HIL_COMPILE_SERVER", "1")
    models = tmp_path / "models"
    models.mkdir()
    (models / "echo.py").write_text(ECHO)
    spec, said = get_model("echo", models), []
    for test in ("t0", "t1", None):
        if test is None:
            monkeypatch.delenv("PYTEST_CURRENT_TEST")
        else:
            monkeypatch.setenv("PYTEST_CURRENT_TEST", test)
        with pytest.raises(ModelError) as err:
            compile_model(spec, "SM8650", "fp16", discover())
        said.append(re.search(r"forked by (\d+), cache (\S+), test (\S+)", str(err.value)))
    assert all(said), said
    assert [(m[2], m[3]) for m in said] == [(str(cache), t) for t in ("t0", "t1", "none")]
    servers = {m[1] for m in said}
    assert len(servers) == 1 and int(servers.pop()) != os.getpid()


def test_a_forked_compile_gives_what_a_new_process_gives(tmp_path, monkeypatch):
    sdk, spec, built = discover(), get_model("linear_relu"), {}
    for server in ("0", "1"):
        monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / server))
        monkeypatch.setenv("EXECUTORCH_HIL_COMPILE_SERVER", server)
        built[server] = compile_model(spec, "SM8650", "fp16", sdk)
    fresh, forked = (Path(built[s].pte).parent for s in ("0", "1"))
    refs = sorted(p.name for p in (fresh / "ref").iterdir())
    assert refs and refs == sorted(p.name for p in (forked / "ref").iterdir())
    _same, mismatch, errors = filecmp.cmpfiles(fresh / "ref", forked / "ref", refs, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
    meta = [json.loads((d / "meta.json").read_text()) for d in (fresh, forked)]
    for m in meta:
        m.pop("pte_sha256")  # QNN's context binary carries a few bytes that differ per build
    assert meta[0] == meta[1]
    assert (fresh / "model.pte").stat().st_size == (forked / "model.pte").stat().st_size


@pytest.mark.parametrize("which", ["expected", "inputs"])
def test_a_damaged_reference_file_is_rebuilt_with_a_notice_naming_it(which, cache):
    """A reference output (or input) zeroed at its own size: the entry is rebuilt with a notice
    naming the file, not run (that was a runtime verdict, "mismatch ... max abs diff")."""
    sdk, spec = discover(), get_model("linear_relu")
    built = compile_model(spec, "SM8650", "fp16", sdk)
    ref = getattr(built.methods["forward"], which)[0].file
    good = ref.read_bytes()
    ref.write_bytes(b"\0" * len(good))
    notes: list[str] = []
    again = compile_model(spec, "SM8650", "fp16", sdk, notice=notes.append)
    name = str(ref.relative_to(built.pte.parent))
    assert len(notes) == 1 and f"({name} sha256" in notes[0], notes
    assert getattr(again.methods["forward"], which)[0].file.read_bytes() == good
    # an entry of an older harness (no reference sha256): recorded on use, not rebuilt
    meta_path = again.pte.parent / "meta.json"
    meta = json.loads(meta_path.read_text())
    recorded = meta.pop("files_sha256")
    assert name in recorded
    meta_path.write_text(json.dumps(meta))
    notes.clear()
    compile_model(spec, "SM8650", "fp16", sdk, notice=notes.append)
    assert not notes and json.loads(meta_path.read_text())["files_sha256"] == recorded
