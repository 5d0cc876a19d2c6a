"""Cached builds checked by their content on use: the QNN interposer and the native runner
carry the sha256 and executable bit recorded at build time, so a file gone non-executable,
emptied or truncated is rebuilt, with a notice naming it (a `chmod -x` runner hung the session
in the fork server pool; a truncated one made every test fail with "the fork server exited
(-11)", naming no file)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.cache import CacheRepairWarning, build_record, file_sha256, verify_build


def made(tmp_path: Path, executable: bool = True) -> tuple[Path, Path]:
    binary = tmp_path / "harness-runner"
    binary.write_bytes(b"\x7fELF" + os.urandom(4096))
    binary.chmod(0o755 if executable else 0o644)
    marker = tmp_path / "build.ok"
    marker.write_text("executorch=1.5.1\n" + build_record([binary]))
    return binary, marker


@pytest.mark.parametrize("damage", ["chmod -x", "empty", "truncated", "overwritten", "gone"])
def test_a_damaged_build_is_named_by_its_file(tmp_path, damage):
    binary, marker = made(tmp_path)
    assert verify_build(marker, [binary]) == ""
    if damage == "chmod -x":
        binary.chmod(0o644)
    elif damage == "empty":
        binary.write_bytes(b"")
    elif damage == "truncated":
        binary.write_bytes(binary.read_bytes()[:100])
    elif damage == "overwritten":
        binary.write_bytes(b"\x7fELF" + os.urandom(4096))
    else:
        binary.unlink()
    problem = verify_build(marker, [binary])
    assert str(binary) in problem, problem


def test_a_build_of_an_older_harness_is_checked_for_shape_then_recorded(tmp_path):
    binary, marker = made(tmp_path)
    marker.write_text("executorch=1.5.1\n")  # no sha256 recorded
    binary.chmod(0o644)
    assert "not executable" in verify_build(marker, [binary])
    binary.chmod(0o755)
    assert verify_build(marker, [binary]) == ""
    assert file_sha256(binary) in marker.read_text()  # recorded: checked by content from now on
    binary.write_bytes(b"\x7fELF")
    assert "sha256" in verify_build(marker, [binary])


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the interposer")
@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_cached_interposer_is_rebuilt_with_a_notice_naming_it(own_cache, damage):
    from harness.qnn.interposer_build import build_interposer

    built = build_interposer()
    sha = file_sha256(built)
    built.write_bytes(built.read_bytes()[:1000] if damage == "truncated" else b"")
    with pytest.warns(CacheRepairWarning, match=f"interposer is damaged: {built}"):
        again = build_interposer()
    assert again == built and file_sha256(again) == sha


def test_a_damaged_cached_runner_is_rebuilt_with_a_notice_naming_it(tmp_path, monkeypatch):
    """The decision of build_host_runner (the cmake build itself is test_native_build.py's):
    a runner whose file no longer matches its record is removed and built again."""
    from harness.runner.builds import host

    builds: list[Path] = []

    def build(commands, log, what):  # stands for cmake + ninja: writes the binary
        out = tmp_path / "cache" / host.host_build_key(host.runner_source_dir()) / "build"
        out.mkdir(parents=True, exist_ok=True)
        (out / host.RUNNER_NAME).write_bytes(b"\x7fELF" + b"runner" * 100)
        (out / host.RUNNER_NAME).chmod(0o755)
        builds.append(out / host.RUNNER_NAME)

    monkeypatch.setattr(host, "run_commands", build)
    monkeypatch.setattr(host, "host_runner_available", lambda: (True, ""))
    binary = host.build_host_runner(tmp_path / "cache")
    assert host.build_host_runner(tmp_path / "cache") == binary and len(builds) == 1
    binary.chmod(0o644)
    with pytest.warns(CacheRepairWarning, match=f"runner build is damaged: {binary} is not "
                                                "executable"):
        assert host.build_host_runner(tmp_path / "cache") == binary
    assert len(builds) == 2 and os.access(binary, os.X_OK)


def test_cached_build_builds_once_announces_damage_and_not_a_forced_rebuild(tmp_path):
    """The one sequence every cached build uses (harness.cache.cached_build)."""
    from harness.cache import cached_build

    entry, builds = tmp_path / "entry", []
    output = entry / "lib.so"

    def build() -> str:
        entry.mkdir(exist_ok=True)
        output.write_bytes(b"\x7fELF" + bytes(len(builds) + 1) * 64)
        builds.append(1)
        return "what=it\n"

    cached_build(entry, [output], build, "thing")
    cached_build(entry, [output], build, "thing")
    assert len(builds) == 1 and (entry / "build.ok").read_text().startswith("what=it\nsha256:")
    assert (tmp_path / "entry.lock").is_file()
    output.write_bytes(b"")
    with pytest.warns(CacheRepairWarning, match=f"the cached thing is damaged: {output} "):
        cached_build(entry, [output], build, "thing")
    assert len(builds) == 2 and verify_build(entry / "build.ok", [output]) == ""
    output.write_bytes(b"")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached_build(entry, [output], build, "thing", force=True)
    assert len(builds) == 3

    def refuse() -> None:
        raise RuntimeError("no compiler")

    cached_build(entry, [output], build, "thing", preflight=refuse)  # done: never asked
    with pytest.raises(RuntimeError, match="no compiler"):
        cached_build(entry, [output], build, "thing", force=True, preflight=refuse)
