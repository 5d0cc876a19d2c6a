"""ccache in front of the runner builds' compilers (harness.ccache): every CMake configure gets
it as the C and C++ compilers' launcher when it is installed and nothing without it, every
build runs with its directory under the harness cache, and no build key depends on it (its
objects are the compiler's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness import ccache
from harness.runner.builds.android import android_build_commands, android_wrapper_commands
from harness.runner.builds.arm64_linux import _arm64_build_key, arm64_linux_build_commands
from harness.runner.builds.cmake import run_commands
from harness.runner.builds.host import host_build_commands, host_build_key
from harness.runner.builds.inputs import runner_source_dir

FOUND = Path("/opt/tools/bin/ccache")
LAUNCHERS = (f"-DCMAKE_C_COMPILER_LAUNCHER={FOUND}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={FOUND}")


def configures(tmp_path: Path) -> list[list[str]]:
    """The configure line of every CMake build the harness runs."""
    b = tmp_path / "b"
    return [host_build_commands(b)[0],
            arm64_linux_build_commands(b, tmp_path / "tc.cmake", tmp_path / "et")[0],
            android_build_commands(b, tmp_path / "ndk", tmp_path / "prefix")[0],
            android_wrapper_commands(b, tmp_path / "ndk", tmp_path / "prefix")[0]]


def test_every_configure_launches_the_compilers_through_ccache(monkeypatch, tmp_path):
    monkeypatch.setattr(ccache, "find_ccache", lambda: FOUND)
    for configure in configures(tmp_path):
        assert all(flag in configure for flag in LAUNCHERS), configure


def test_without_ccache_no_configure_names_a_launcher(monkeypatch, tmp_path):
    monkeypatch.setattr(ccache, "find_ccache", lambda: None)
    for configure in configures(tmp_path):
        assert not [arg for arg in configure if "COMPILER_LAUNCHER" in arg], configure
    assert ccache.environment() is None  # the build inherits this environment as it is


def test_builds_run_with_the_cache_under_the_harness_cache(monkeypatch, tmp_path):
    """run_commands (every CMake build) gives its processes CCACHE_DIR under the harness cache
    (not the runner cache the build goes to) and a size limit."""
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "hil"))
    monkeypatch.setattr(ccache, "find_ccache", lambda: FOUND)
    log = tmp_path / "runner-cache" / "build.log"
    show = "import os; print('seen', os.environ['CCACHE_DIR'], os.environ['CCACHE_MAXSIZE'])"
    run_commands([[sys.executable, "-c", show]], log, "a build")
    assert f"seen {tmp_path / 'hil' / 'ccache'} {ccache.MAX_SIZE}" in log.read_text()
    assert (tmp_path / "hil" / "ccache").is_dir()


@pytest.mark.parametrize("key", [host_build_key, _arm64_build_key])
def test_build_keys_do_not_depend_on_ccache(monkeypatch, key):
    keys = set()
    for found in (FOUND, None):
        monkeypatch.setattr(ccache, "find_ccache", lambda found=found: found)
        keys.add(key(runner_source_dir()))
    assert len(keys) == 1
