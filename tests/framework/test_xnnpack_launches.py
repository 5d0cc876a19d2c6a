"""harness.results.xnnpack_log and xnnpack_launches on the runtime's own log lines (as 1.5.1
prints them) and synthetic memory readings: the branch each launch took and the verdict over
several launches."""

from __future__ import annotations

import pytest

from harness.results import xnnpack_log
from harness.results.xnnpack import MIB, CacheLoad
from harness.results.xnnpack_launches import (FileState, Launch, collect_stories, judge,
                                             shared_use)

W = 32 * MIB
PATH = "/c/stack.xnncache"
LOG = "{} {:02d}:00:00.000 executorch:XNNWeightsCache.cpp:{}] {}"


def line(text: str, number: int = 1, level: str = "I") -> str:
    return LOG.format(level, 0, number, text)


@pytest.mark.parametrize("text,event,errno", [
    ("open(/a/b/c) failed (errno=20)", "open_failed", 20),
    ("flock(/a/c) failed (errno=11)", "flock_failed", 11),
    ("ftruncate(0) failed for /a/c (errno=5); heap fallback this init", "truncate0_failed", 5),
    ("reserve_space ftruncate to 8392704 failed (errno=27)", "reserve_ftruncate_failed", 27),
    ("reserve_space mmap 4198400 bytes failed (errno=12)", "reserve_mmap_failed", 12),
    ("Failed to extend file for index (errno=28)", "index_extend_failed", 28),
    ("Failed to write index (errno=28)", "index_write_failed", 28),
    ("fsync of packed cache failed (errno=5)", "fsync_failed", 5),
    ("look_up: seed mismatch for 'ab12' (cached=0x5a5a5a45, current=0x0000001f); treating as "
     "miss for re-pack", "seed_mismatch", None),
    ("Loaded packed weight cache: /a/c (4 entries)", "loaded", None),
    ("Saved packed weight index: 8 entries at offset 33587200, file_bytes=33588436", "saved", None),
    ("Warning: Unpacked weight and bias were not registered with names, this will add new cache "
     "entries for packed data and may affect performance.", "unnamed", None),
])
def test_every_format_string_is_read(text, event, errno):
    found = xnnpack_log.events([line(text)])
    assert [(e.event, e.errno) for e in found] == [(event, errno)]


@pytest.mark.parametrize("lines,requested,enabled,placement,branch,code", [
    ([], PATH, False, "fallback", "cache_off", None),
    ([], "", True, "fallback", "empty_path", None),
    (["open(/a/c) failed (errno=30)"], PATH, True, "fallback", "open_failed", 30),
    (["flock(/a/c) failed (errno=11)"], PATH, True, "fallback", "flock_failed", 11),
    (["Loaded packed weight cache: /a/c (4 entries)"], PATH, True, "fallback",
     "loaded_from_disk", None),
    (["Loaded packed weight cache: /a/c (8 entries)"], PATH, True, "mapped", "loaded", None),
    (["Opened packed weight file for writing: /a/c", "Failed to write index (errno=28)"], PATH,
     True, "mapped", "index_write_failed", 28),
    (["Opened packed weight file for writing: /a/c",
      "Saved packed weight index: 8 entries at offset 1, file_bytes=2"], PATH, True, "mapped",
     "fresh_write", None),
    (["Loaded packed weight cache: /a/c (8 entries)", "open(/a/c) failed (errno=30)"], PATH,
     True, "mapped", "loaded_reopen_failed", 30),
    (["Opened packed weight file for writing: /a/c", "Warning: Unpacked weight and bias were "
      "not registered with names, this will add new cache entries"], PATH, True, "fallback",
     "unnamed_constant", None),
    ([], PATH, True, "fallback", "unexplained", None),
])
def test_launch_reason_is_the_first_failure(lines, requested, enabled, placement, branch, code):
    why = xnnpack_log.launch_reason([line(t) for t in lines], requested, enabled, placement)
    assert (why.branch, why.errno) == (branch, code)
    assert why.reason
    if code == 30:
        assert "30 (EROFS)" in why.reason


def load(heap: float, mapped: float, branch: str, loaded: int | None = None,
         errno: int | None = None) -> CacheLoad:
    return CacheLoad("s", "A", "forward", PATH, "fallback" if heap >= 0.1 * W else "mapped", W,
                     int(heap), int(mapped), 0, 0, 0, 2, (), branch, errno, "why", loaded)


def test_partial_cache_is_permanent_and_names_the_fraction():
    same = FileState(33588436, "1")
    launches = [Launch(load(16.1 * MIB, 16 * MIB, "loaded_from_disk", 4), same, same)
                for _ in range(3)]
    with collect_stories() as stories:
        story = judge("partial", launches, packs=8)
    assert stories == [story]
    assert story.verdict == "permanent" and story.branch == "loaded_from_disk"
    assert story.text == ("partial cache: 4 of 8 packs loaded; 16.1 MiB re-packed on each of 3 "
                          "launches (into heap); the file never changes: permanent")
    assert story.to_json()["launches"][0]["file_changed"] is False


def test_foreign_cache_is_named():
    same = FileState(100, "1")
    story = judge("f", [Launch(load(W, 0, "loaded_from_disk", 2), same, same)] * 3, packs=8)
    assert story.verdict == "permanent"
    assert story.text.startswith("another model's cache: 2 entries loaded, none of the 8")


def test_lock_held_then_released_heals():
    full = FileState(33588436, "1")
    story = judge("lock", [Launch(load(W, 0, "flock_failed", errno=11), full, full),
                           Launch(load(0.1 * MIB, W, "loaded", 8), full, full)], packs=8)
    assert story.verdict == "heals" and story.branch == "flock_failed"
    assert "errno 11" in story.text


def test_a_file_never_indexed_is_permanent():
    launches = [Launch(load(0, W, "index_write_failed", errno=28), FileState(W, "1"),
                       FileState(W, "1")) for _ in range(3)]
    story = judge("index", launches, packs=8)
    assert story.verdict == "permanent"
    assert "into a file never indexed" in story.text and "28 (ENOSPC)" in story.text


def test_written_once_then_reused():
    empty, full = FileState(None), FileState(W, "1")
    story = judge("ok", [Launch(load(0, W, "fresh_write"), empty, full),
                         Launch(load(0, W, "loaded", 8), full, full)], packs=8)
    assert story.verdict == "reused" and story.branch == ""
    assert "written once" in story.text


def test_judge_needs_launches():
    with pytest.raises(ValueError):
        judge("none", [])


def test_fallback_between_uses_heals():
    """Written, then a launch meets another process's lock, then maps: heals at launch 3."""
    full = FileState(W, "1")
    story = judge("two", [Launch(load(0, W, "fresh_write"), FileState(None), full),
                          Launch(load(W, 0, "flock_failed", errno=11), full, full),
                          Launch(load(0, W, "loaded", 8), full, full)], packs=8)
    assert story.verdict == "heals" and story.branch == "flock_failed"
    assert "on launch 2" in story.text and "from launch 3 on" in story.text


def test_shared_use_counts_launches_by_the_log():
    with collect_stories() as stories:
        use = shared_use("conv", PATH, [("o0", "fresh_write", None), ("o1", "loaded", None),
                                        ("o2", "flock_failed", 11)])
    assert stories == [use] and use.heap_launches == 1
    assert use.text.startswith("2 of 3 launches on the shared cache used the file; 1 did not")
    assert use.to_json()["verdict"] == "shared"
    never = shared_use("none", PATH, [("o0", "flock_failed", 11)])
    assert "never used" in never.text and never.to_json()["verdict"] == "never-used"


def test_a_later_load_in_a_writing_process_is_still_a_fresh_write():
    why = xnnpack_log.launch_reason(
        [line("Opened packed weight file for writing: /a/c"),
         line("Loaded packed weight cache: /a/c (8 entries)")], PATH, True, "mapped")
    assert why.branch == "fresh_write"


def test_a_second_open_failure_of_a_later_module_is_the_in_process_reopen():
    """Two modules on one path in one process: the first's open(O_CREAT) failed; the second's
    failure is initialize_for_runtime's reopen (entries in memory), the first's stays its own."""
    lines = [line("open(/a/c) failed (errno=30)"), line("open(/a/c) failed (errno=2)")]
    first = xnnpack_log.launch_reason(lines, PATH, True, "fallback", earlier_inits=0)
    second = xnnpack_log.launch_reason(lines, PATH, True, "fallback", earlier_inits=1)
    assert (first.branch, first.errno) == ("open_failed", 30)
    assert (second.branch, second.errno) == ("reopen_failed", 2)
    assert "2 (ENOENT)" in second.reason
    # a later module of a process whose first open failed only once did not reopen and fail
    alone = xnnpack_log.launch_reason(lines[:1], PATH, True, "fallback", earlier_inits=1)
    assert alone.branch == "open_failed"
