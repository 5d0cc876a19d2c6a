"""X1: XNNPACK packed-weight cache. Are the packed weights in the mmap'd cache file, or on heap?

Model `xnn_linear_stack` (8 x Linear(1024, 1024) fp32, 32 MiB of weights in `forward`) lowered
to XNNPACK. Every launch is a fresh runner process (`scenario_driver.run`): snapshot, load the
module with the cache options, first execute (delegate init packs the weights), the runtime's
counter probes, a second execute, destroy. Placement is judged from measured memory
(harness.results.xnnpack): heap = Anonymous growth from before load to after the first execute;
mapped = Rss of the cache file's own mappings.

What executorch 1.5.1 does, measured (encoded below as the expected outcomes):
- no cache: weights on heap;
- fresh cache path: the first launch packs straight into the file's shared mappings (mapped),
  writes an index, and later launches map the file;
- unwritable location: `open(...) failed (errno=N)` in the log, weights on heap. The runner is
  root on the host simulator, so the location is made unusable for anyone: its parent is a
  regular file (ENOTDIR, errno 20);
- truncated cache file: the index trailer is gone, the load fails silently, the runtime
  truncates the file and rewrites it in the same launch (mapped, file restored);
- cache file of another model: it loads "successfully" (the log counts its entries), none of
  them match, and every pack goes to heap, on this and every later launch: the file is never
  extended (`loaded_from_disk_`). Judged across three launches: a named, permanent fallback;
- partial cache (the index's entry count patched from 8 to 4): 4 packs mapped, 4 re-packed
  into heap on every launch, the file never changes: permanent;
- seed mismatch (one entry's XNNPACK seed patched, as after an XNNPACK upgrade): that pack is
  re-packed into the file once and the index rewritten; later launches map it all: heals.
- two modules sharing one cache path: the second module finds the first one's packs (no heap,
  no second copy of the mapping).

The Python runner cannot pass backend options (pybindings 1.5.1), so these need the native one.
"""

from __future__ import annotations

import posixpath
import struct


from harness.results.failures import Failure, HilFailure
from harness.results.xnnpack import (HEAP_LIMIT, MAPPED_MIN, assert_fallback,
                             assert_no_fallback)
from harness.drive.xnnpack_cache import FOOTER, PACKS

# Expected outcomes of the bad-cache cases, as executorch 1.5.1 behaves (see module docstring).
TRUNCATED_CACHE_OUTCOME = "rewritten"  # same launch: mapped, file back to full size
FOREIGN_CACHE_OUTCOME = "fallback-every-launch"  # heap on every launch, file never extended
SEED_MISMATCH_OUTCOME = "heals"  # re-packed into the file once (PR #22183); "permanent" before it


def test_no_cache(xnn):
    """Weight cache off: every packed byte is heap (the baseline the others compare with)."""
    result = xnn.launch("no_cache", None)
    load = assert_fallback(result, xnn.weights["forward"])
    xnn.record(result, load)
    assert load.mapped_bytes == 0


def test_fresh_cache_first_launch_writes_it(xnn):
    """A new cache path: the first launch packs into the file's mappings and saves it."""
    cache = xnn.path("stack.xnncache")
    result = xnn.launch("fresh", cache)
    load = assert_no_fallback(result, xnn.weights["forward"])
    xnn.record(result, load)
    size = xnn.size(cache)
    assert size is not None and size >= MAPPED_MIN * xnn.weights["forward"], \
        f"cache file {cache} after the first launch: {size} bytes\n{load.describe()}"


def test_warm_cache_second_launch_maps_it(xnn):
    """The second launch maps the saved file: >= 90% of the weights file-backed, < 10% heap."""
    cache = xnn.path("stack.xnncache")
    xnn.launch("write", cache)
    written = xnn.size(cache)
    result = xnn.launch("warm", cache)
    load = assert_no_fallback(result, xnn.weights["forward"])
    xnn.record(result, load)
    assert load.heap_bytes < HEAP_LIMIT * xnn.weights["forward"]
    assert xnn.size(cache) == written, "a warm launch rewrote the cache file"


def test_unwritable_cache_directory(xnn):
    """The cache cannot be created (its parent is a regular file: fails even for root, with
    ENOTDIR): the fallback to heap is detected, whatever errno the runtime got."""
    blocker = xnn.path("not-a-directory")
    xnn.sh("touch", blocker)
    cache = posixpath.join(blocker, "stack.xnncache")
    result = xnn.launch("unwritable", cache)
    load = assert_fallback(result, xnn.weights["forward"], branch="open_failed")
    xnn.record(result, load)
    assert load.errno == 20, load.describe()  # ENOTDIR
    assert xnn.size(cache) is None


def test_truncated_cache_file(xnn):
    """A cache file cut in half: never a crash or a wrong output. 1.5.1 rewrites it."""
    cache = xnn.path("stack.xnncache")
    xnn.launch("write", cache)
    full = xnn.size(cache)
    assert full
    xnn.sh("truncate", "-s", str(full // 2), cache)
    result = xnn.launch("truncated", cache)
    load = assert_no_fallback(result, xnn.weights["forward"]) \
        if TRUNCATED_CACHE_OUTCOME == "rewritten" else assert_fallback(result, xnn.weights["forward"])
    xnn.record(result, load)
    assert xnn.size(cache) == full, \
        f"truncated cache not rewritten to {full} bytes (now {xnn.size(cache)})\n{load.describe()}"
    again = xnn.launch("after_truncation", cache)
    xnn.record(again, assert_no_fallback(again, xnn.weights["forward"]))


def test_cache_file_from_another_model(xnn):
    """A valid cache file of other weights: it loads, nothing matches, and every launch packs
    all weights to heap again, with correct outputs. Judged across launches, as 1.5.1 does it:
    a named, permanent fallback (`loaded_from_disk_`), the file never changes."""
    foreign = xnn.path("other-model.xnncache")
    written = xnn.launch("write_other", foreign, (("A", "other"),))
    xnn.record(written, assert_no_fallback(written, xnn.weights["other"]))
    cache = xnn.path("stack.xnncache")
    xnn.sh("cp", foreign, cache)
    assert FOREIGN_CACHE_OUTCOME == "fallback-every-launch"
    story = xnn.story("foreign", cache, expect="fallback")
    for launch in story.launches:
        assert launch.load.classification == "fallback", story.text
        assert launch.load.branch == "loaded_from_disk", launch.load.describe()
        assert launch.load.heap_bytes >= 0.8 * xnn.weights["forward"], launch.load.describe()
    assert story.verdict == "permanent" and "another model's cache" in story.text, story.text
    assert not any(launch.before != launch.after for launch in story.launches), \
        f"the runtime changed the foreign cache file: {story.text}"


def test_partial_cache_is_a_permanent_fallback(xnn):
    """The index's entry count patched from 8 to 4: the 4 packs it names are mapped, the other
    4 are re-packed into heap on every launch and never added to the file (the runtime keeps
    reporting a loaded cache). Judged across launches: permanent, 4 of 8."""
    cache = xnn.path("stack.xnncache")
    written = xnn.launch("write", cache)
    xnn.record(written, assert_no_fallback(written, xnn.weights["forward"], branch="fresh_write"))
    size = xnn.size(cache)
    assert size
    _, count, _ = xnn.index(cache)
    assert count == PACKS, f"{cache}: {count} index entries, the program has {PACKS} packs"
    xnn.write(cache, size - FOOTER + 8, struct.pack("<I", PACKS // 2))
    assert xnn.index(cache)[1] == PACKS // 2
    story = xnn.story("partial", cache, expect="fallback")
    half = xnn.weights["forward"] / 2
    for launch in story.launches:
        load = launch.load
        assert load.branch == "loaded_from_disk" and load.loaded_entries == PACKS // 2, \
            load.describe()
        assert abs(load.heap_bytes - half) < HEAP_LIMIT * xnn.weights["forward"], load.describe()
        assert abs(load.mapped_bytes - half) < HEAP_LIMIT * xnn.weights["forward"], load.describe()
    # a partial launch is a fallback though half its packs are mapped (no 80 % heap rule)
    assert_fallback(xnn.driver.results[-1], xnn.weights["forward"], branch="loaded_from_disk")
    assert story.verdict == "permanent", story.text
    assert f"partial cache: {PACKS // 2} of {PACKS} packs loaded" in story.text, story.text
    assert "the file never changes" in story.text, story.text


def test_seed_mismatch(xnn):
    """One entry's XNNPACK seed patched (what an XNNPACK upgrade looks like to the cache): the
    entry is a miss and is re-packed. Upstream main of 2026-08-22 sends it to heap for ever
    (`loaded_from_disk_`); 1.5.1, like upstream PR #22183, packs it into the file once, rewrites
    the index, and the next launches map it all: judged across launches, it heals
    (SEED_MISMATCH_OUTCOME)."""
    cache = xnn.path("stack.xnncache")
    xnn.launch("write", cache)
    _, _, entries = xnn.index(cache)
    name, seed_at = entries[0]
    (seed,) = struct.unpack("<I", xnn.read(cache, seed_at, 4))
    xnn.write(cache, seed_at, struct.pack("<I", seed ^ 0x5A5A5A5A))
    story = xnn.story("seed", cache, expect="mapped")
    one_pack = xnn.weights["forward"] / PACKS
    first = story.launches[0]
    assert first.load.branch == "seed_mismatch", first.load.describe()
    assert any(name in line for line in first.load.runtime_log if "seed mismatch" in line), \
        first.load.describe()
    assert abs(first.repacked_bytes - one_pack) < 0.5 * one_pack, story.text
    for later in story.launches[1:]:
        assert later.load.branch == "loaded", later.load.describe()
    assert story.verdict == SEED_MISMATCH_OUTCOME, story.text


def test_two_modules_share_one_cache_path(xnn):
    """Two modules of one program, one cache path: the second finds the first one's packs
    (no heap, no second copy), on the writing launch and on the warm one."""
    cache = xnn.path("stack.xnncache")
    weights = xnn.weights["forward"]
    for launch in ("shared_write", "shared_warm"):
        result = xnn.launch(launch, cache, (("A", "forward"), ("B", "forward")))
        a = assert_no_fallback(result, weights, "A")
        b = assert_no_fallback(result, weights, "B")
        xnn.record(result, a, b)
        assert b.mapped_bytes < (1 + HEAP_LIMIT) * weights, \
            f"module B mapped a second copy of the packed weights:\n{b.describe()}"


def test_corrupted_cache_contents(xnn):
    """A cache file whose packed data is damaged but whose index is intact must not produce
    wrong outputs: the runtime has to notice (checksum) and repack, or fail the load.
    executorch 1.5.1 maps the damaged packs as they are (known issue, strict xfail)."""
    cache = xnn.path("stack.xnncache")
    xnn.launch("write", cache)
    size = xnn.size(cache)
    assert size and size > 4 << 20
    # 200 KiB of zeros 1 MiB into the file: inside the packed weights, far from the index
    xnn.sh("dd", "if=/dev/zero", f"of={cache}", "bs=1024", "seek=1024", "count=200", "conv=notrunc")
    assert xnn.size(cache) == size
    # The same program without a cache gives the reference outputs (a control in the same run),
    # so a wrong output with the damaged cache is the cache's contents being trusted, not an
    # accuracy regression of the program, which would fail this control first.
    xnn.launch("control_no_cache", None)
    try:
        xnn.launch("corrupted", cache)  # asserts every output matches the CPU reference
    except HilFailure as exc:
        if exc.failure.kind != "mismatch":
            raise
        raise HilFailure(
            f"the damaged cache's packed weights were used: outputs wrong with the cache whose "
            f"packed data was overwritten, right without a cache in the same run:\n{exc}",
            Failure("check", "a damaged XNNPACK packed-weight cache was used as it is "
                    "(outputs wrong with it, right without a cache)")) from exc
