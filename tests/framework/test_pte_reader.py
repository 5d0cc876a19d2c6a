"""harness.programs.pte_reader and pte_cache: `--pte` programs read once per content, many in
one child process, each bad one named by its own error.

The child is `pte_reader.main` run in this process (its stdout captured as a child's would be)
with a stand-in for `inspect_program`, so these tests count the launches without importing
executorch; test_program.py reads real programs through real children.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
from pathlib import Path

import pytest

from harness.errors import ModelError
from harness.process import ProcessOutput
from harness.programs import pte_cache
from harness.programs import pte_reader as pr
from harness.programs.pte import FILE_IDENTIFIER, MethodInfo, ProgramInfo, TensorSpec, check_file


def _program(path: Path, tag: str) -> Path:
    """Bytes that pass check_file (root offset, "ET12", no extended header), unique by tag."""
    path.write_bytes(b"\x1c\x00\x00\x00" + FILE_IDENTIFIER + b"\x00" * 8 + tag.encode())
    return path


def _fake_inspect(path: Path) -> ProgramInfo:
    """What inspect_program would say, from the bytes alone: `bad` in the bytes is a damaged
    program, `crash` kills the child, `hang` hangs it (see Launches)."""
    size = check_file(path)
    data = Path(path).read_bytes()
    if b"bad" in data:
        raise ModelError(f"{path}: damaged or truncated ExecuTorch program, it does not "
                         "deserialize (struct.error: test)")
    if b"crash" in data:
        raise _Crash(-11)
    if b"hang" in data:
        raise _Crash(None)
    tag = data[16:].decode()
    return ProgramInfo(Path(path), size, hashlib.sha256(data).hexdigest(),
                       {tag: MethodInfo(tag, (TensorSpec("float32", (1, 4), True),),
                                        (TensorSpec("float32", (1, 4), True),), ())}, ())


class _Crash(BaseException):
    """The child dies (a signal: returncode) or hangs (None) while reading a program."""

    def __init__(self, returncode: int | None):
        self.returncode = returncode


class Launches:
    """Stands in for pr._run_child: runs the child's main() here and records each batch."""

    def __init__(self) -> None:
        self.batches: list[list[Path]] = []
        self.timeouts: list[float] = []

    def __call__(self, paths: list[Path], timeout: float) -> ProcessOutput:
        self.batches.append(list(paths))
        self.timeouts.append(timeout)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                code = pr.main([str(p) for p in paths])
            except _Crash as crash:
                print("Fatal Python error: Segmentation fault")
                return ProcessOutput(crash.returncode, out.getvalue(), "stderr words",
                                     crash.returncode is None)
        return ProcessOutput(code, out.getvalue(), "", False)


@pytest.fixture
def launches(monkeypatch, tmp_path) -> Launches:
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pr, "inspect_program", _fake_inspect)
    fake = Launches()
    monkeypatch.setattr(pr, "_run_child", fake)
    return fake


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / pte_cache.CACHE_DIR).glob("*"))


def test_a_second_read_of_the_same_content_starts_no_process(launches, tmp_path):
    pte = _program(tmp_path / "a.pte", "forward")
    first = pr.read_program(pte)
    assert len(launches.batches) == 1 and first.methods.keys() == {"forward"}
    assert pr.read_program(pte) == first
    copy = _program(tmp_path / "copy.pte", "forward")  # the same bytes under another name
    assert pr.read_program(copy) == dataclasses.replace(first, path=copy)
    assert len(launches.batches) == 1, "a cached content was read again"
    [entry] = _entries(tmp_path)  # one entry, complete: no temp file left
    assert entry.name.startswith(first.sha256) and entry.suffix == ".json"
    assert json.loads(entry.read_text())["sha256"] == first.sha256


def test_a_changed_file_is_read_again(launches, tmp_path):
    pte = _program(tmp_path / "a.pte", "forward")
    assert pr.read_program(pte).methods.keys() == {"forward"}
    _program(pte, "prefill")
    assert pr.read_program(pte).methods.keys() == {"prefill"}
    assert len(launches.batches) == 2


def test_another_reader_or_executorch_is_a_miss(launches, tmp_path, monkeypatch):
    """The entry is keyed by the reader as well as the content: another executorch (or
    harness) never reuses an answer."""
    pte = _program(tmp_path / "a.pte", "forward")
    pr.read_program(pte)
    key = pte_cache.reader_key()
    monkeypatch.setattr(pte_cache, "_executorch_identity", lambda: ["1.6.0", "elsewhere"])
    pte_cache.reader_key.cache_clear()
    try:
        assert pte_cache.reader_key() != key
        pr.read_program(pte)
        assert len(launches.batches) == 2 and len(_entries(tmp_path)) == 2
    finally:
        pte_cache.reader_key.cache_clear()


def test_the_reader_key_follows_the_installed_executorch_and_the_reader(monkeypatch):
    pte_cache.reader_key.cache_clear()
    try:
        key = pte_cache.reader_key()
        assert pte_cache.reader_key() == key  # stable within a process
        monkeypatch.setattr(pte_cache.harness, "__version__", "99.0")
        pte_cache.reader_key.cache_clear()
        assert pte_cache.reader_key() != key
    finally:
        pte_cache.reader_key.cache_clear()


def test_a_damaged_entry_is_a_miss(launches, tmp_path):
    pte = _program(tmp_path / "a.pte", "forward")
    first = pr.read_program(pte)
    [entry] = _entries(tmp_path)
    for broken in ("{half an entry", json.dumps({**json.loads(entry.read_text()), "format": 0})):
        entry.write_text(broken)
        assert pr.read_program(pte) == first
    assert len(launches.batches) == 3


def test_a_batch_is_read_in_one_process(launches, tmp_path):
    paths = [_program(tmp_path / f"p{i}.pte", f"m{i}") for i in range(6)]
    twin = _program(tmp_path / "twin.pte", "m0")  # the same content: read once
    answers = pr.read_programs([*paths, twin])
    assert launches.batches == [paths]
    assert [a.path for a in answers] == [*paths, twin]
    assert [list(a.methods) for a in answers] == [[f"m{i}"] for i in range(6)] + [["m0"]]
    assert len(_entries(tmp_path)) == 6
    assert pr.read_programs(paths) == answers[:6] and len(launches.batches) == 1


def test_a_damaged_program_in_a_batch_is_its_own_error(launches, tmp_path):
    good = [_program(tmp_path / f"p{i}.pte", f"m{i}") for i in range(3)]
    bad = _program(tmp_path / "bad.pte", "bad")
    missing = tmp_path / "missing.pte"
    answers = pr.read_programs([good[0], bad, good[1], missing, good[2]])
    assert launches.batches == [[good[0], bad, good[1], good[2]]]  # no child for a wrong path
    assert [type(a).__name__ for a in answers] == ["ProgramInfo", "ModelError", "ProgramInfo",
                                                   "ModelError", "ProgramInfo"]
    assert str(answers[1]).startswith(f"{bad}: damaged or truncated ExecuTorch program")
    assert str(answers[3]) == f"{missing}: no such file"
    assert len(_entries(tmp_path)) == 3, "an error was cached"
    with pytest.raises(ModelError, match=f"^{bad}: damaged"):
        pr.read_program(bad)  # read again (errors are not cached), named again
    assert len(launches.batches) == 2


def test_a_program_that_kills_its_child_is_blamed_and_the_rest_are_still_read(launches,
                                                                             tmp_path):
    paths = [_program(tmp_path / f"p{i}.pte", f"m{i}") for i in range(2)]
    crash = _program(tmp_path / "crash.pte", "crash")
    hang = _program(tmp_path / "hang.pte", "hang")
    later = _program(tmp_path / "later.pte", "later")
    answers = pr.read_programs([*paths, crash, hang, later])
    assert launches.batches == [[*paths, crash, hang, later], [hang, later], [later]]
    assert [a.path for a in answers if isinstance(a, ProgramInfo)] == [*paths, later]
    assert str(answers[2]).startswith(f"{crash}: reading the program failed (exit -11):\n")
    assert "Segmentation fault" in str(answers[2])
    assert str(answers[3]) == (f"{hang}: reading the program timed out after "
                               f"{launches.timeouts[1]:.0f} s")
    assert launches.timeouts[0] == pr.CHILD_TIMEOUT_S + 4 * pr.PER_PROGRAM_TIMEOUT_S


def test_a_child_that_dies_before_reading_fails_each_program_once(launches, tmp_path,
                                                                   monkeypatch):
    """Its imports failed: every program is named with the child's words, no retry per
    program."""
    paths = [_program(tmp_path / f"p{i}.pte", f"m{i}") for i in range(3)]

    def broken(batch, timeout):
        launches.batches.append(list(batch))
        return ProcessOutput(1, "", "ModuleNotFoundError: No module named 'executorch'", False)

    monkeypatch.setattr(pr, "_run_child", broken)
    answers = pr.read_programs(paths)
    assert len(launches.batches) == 1
    for path, answer in zip(paths, answers):
        assert isinstance(answer, ModelError)
        assert str(answer).startswith(f"{path}: reading the program failed: the reader process "
                                      "exited 1 before reading any program")
        assert "No module named 'executorch'" in str(answer)
    assert not _entries(tmp_path)


def test_the_childs_chatter_on_stdout_is_skipped():
    info = ProgramInfo(Path("/x/a.pte"), 9, "ab" * 32, {}, ())
    stdout = "\n".join(["[INFO] loading", json.dumps({"reading": 0}), "{not json",
                        json.dumps({"index": 0, "info": info.to_json()}), "[1, 2]",
                        json.dumps({"reading": 1}), json.dumps({"index": 7, "error": "x"})])
    reading, got = pr._parse(stdout, [Path("/x/a.pte"), Path("/x/b.pte")])
    assert reading == 1 and got == {0: info}


def test_an_answer_of_another_format_names_the_program():
    stdout = json.dumps({"index": 0, "info": {"format": 0}})
    _, got = pr._parse(stdout, [Path("/x/a.pte")])
    assert str(got[0]).startswith("/x/a.pte: the reader's answer cannot be read (ModelError")


def test_in_process_reading_starts_no_child(launches, tmp_path):
    paths = [_program(tmp_path / f"p{i}.pte", f"m{i}") for i in range(2)]
    bad = _program(tmp_path / "bad.pte", "bad")
    answers = pr.read_programs([*paths, bad], in_process=True)
    assert not launches.batches
    assert isinstance(answers[2], ModelError) and len(_entries(tmp_path)) == 2
    assert pr.read_programs(paths) == answers[:2] and not launches.batches


def test_start_up_names_every_program_that_cannot_be_read(launches, tmp_path):
    good = _program(tmp_path / "good.pte", "forward")
    bad = _program(tmp_path / "bad.pte", "bad")
    missing = tmp_path / "missing.pte"
    [info] = pr.all_or_error(pr.read_programs([good]))
    assert info.path == good
    with pytest.raises(ModelError) as one:
        pr.all_or_error(pr.read_programs([good, bad]))
    assert str(one.value).startswith(f"{bad}: damaged or truncated")
    with pytest.raises(ModelError) as two:
        pr.all_or_error(pr.read_programs([bad, good, missing]))
    lines = str(two.value).splitlines()
    assert lines[0] == "2 of the 3 programs cannot be read:"
    assert lines[1].startswith(f"{bad}: damaged") and lines[2] == f"{missing}: no such file"
