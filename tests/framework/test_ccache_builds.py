"""Two real host runner builds of the same sources into two fresh runner caches under one
harness cache: every compile of the second is a ccache hit (harness.ccache), so a test that
builds into its own runner cache reuses what an earlier build (scripts/setup.sh's) compiled.

Read from ccache's own counters: a stats log per build (CCACHE_STATSLOG, which names each
compiled source and its outcome, so other builds running meanwhile do not count), and
`ccache --print-stats` of `<harness cache>/ccache`, where the objects must be."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness import ccache
from harness.cache import cache_root
from harness.runner.builds.host import build_host_runner, host_runner_available
from harness.runner.builds.inputs import runner_source_dir

HITS = {"direct_cache_hit", "preprocessed_cache_hit"}


def outcomes(stats_log: Path) -> dict[str, set[str]]:
    """Source -> the counters ccache bumped for its compiles (the stats log's `# source` lines,
    each followed by counter names)."""
    seen: dict[str, set[str]] = {}
    source = ""
    for line in stats_log.read_text().splitlines():
        if line.startswith("# "):
            source = line[2:]
            seen.setdefault(source, set())
        elif line and source:
            seen[source].add(line)
    return seen


def print_stats() -> dict[str, int]:
    out = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=True,
                         env={**os.environ, "CCACHE_DIR": str(ccache.ccache_dir())}).stdout
    return {k: int(v) for k, v in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)}


@pytest.mark.skipif(ccache.find_ccache() is None, reason="ccache is not installed "
                    "(apt-get install ccache; scripts/setup.sh does it)")
def test_a_second_runner_cache_gets_every_compile_from_ccache(tmp_path, monkeypatch):
    ok, why = host_runner_available()
    if not ok:
        pytest.skip(f"host build impossible here: {why}")
    sources = {str(p) for p in runner_source_dir().glob("*.cpp")}
    assert sources
    logs = []
    for name in ("first", "second"):
        log = tmp_path / f"{name}.stats"
        monkeypatch.setenv("CCACHE_STATSLOG", str(log))
        binary = build_host_runner(tmp_path / f"{name}-runner-cache")
        assert binary.is_relative_to(tmp_path / f"{name}-runner-cache")
        logs.append(outcomes(log))
    first, second = logs
    assert sources <= first.keys(), "the first build's compiles did not go through ccache"
    assert sources <= second.keys(), "the second build's compiles did not go through ccache"
    missed = {s: sorted(second[s]) for s in sources if not second[s] & HITS}
    assert not missed, f"compiled again in the second runner cache: {missed}"
    stats = print_stats()  # where the objects are: under the harness cache
    assert ccache.ccache_dir() == cache_root() / "ccache"
    assert stats["files_in_cache"] > 0
    assert stats["direct_cache_hit"] + stats["preprocessed_cache_hit"] >= len(sources)
