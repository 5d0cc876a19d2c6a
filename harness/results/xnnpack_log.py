"""The XNNPACK packed-weight cache's own words: its log lines, read into the branch it took.

ExecuTorch's `XNNWeightsCache.cpp` logs every way its packed-weight cache file can fail
(open, flock, ftruncate, mmap, the index write, fsync, a seed mismatch) and what it did with a
good one (loaded N entries, opened for writing, saved an index). Memory says *where* the packs
went (harness.results.xnnpack); these lines say *why*. The vocabulary is data (`PATTERNS`),
spelled as executorch 1.5.1 logs it (upstream `backends/xnnpack/runtime/XNNWeightsCache.cpp`,
main of 2026-08-22, logs the same format strings).
"""

from __future__ import annotations

import dataclasses
import errno as errno_names
import re

# Every line the cache's source file logs, and the backend's own (it calls the cache).
LINE = re.compile(r"XNNWeightsCache\.cpp|XNNPACKBackend\.cpp|packed weight|weight cache",
                  re.IGNORECASE)

# (event, pattern): each format string of XNNWeightsCache.cpp that says something about the file.
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((event, re.compile(pattern)) for event, pattern in (
    ("open_failed", r"\bopen\((?P<path>.*)\) failed \(errno=(?P<errno>\d+)\)"),
    ("flock_failed", r"\bflock\((?P<path>.*)\) failed \(errno=(?P<errno>\d+)\)"),
    ("truncate0_failed", r"ftruncate\(0\) failed for (?P<path>.*) \(errno=(?P<errno>\d+)\)"),
    ("reserve_ftruncate_failed", r"reserve_space ftruncate to (?P<bytes>\d+) failed "
                                 r"\(errno=(?P<errno>\d+)\)"),
    ("reserve_mmap_failed", r"reserve_space mmap (?P<bytes>\d+) bytes failed \(errno=(?P<errno>\d+)\)"),
    ("index_extend_failed", r"Failed to extend file for index \(errno=(?P<errno>\d+)\)"),
    ("index_write_failed", r"Failed to write index \(errno=(?P<errno>\d+)\)"),
    ("fsync_failed", r"fsync of packed cache failed \(errno=(?P<errno>\d+)\)"),
    ("seed_mismatch", r"look_up: seed mismatch for '(?P<name>[^']*)'"),
    ("corrupt_index", r"load_packed_cache: (truncated entry header|entry '.*' has invalid bounds)"),
    ("heap_alloc_failed", r"XNN weight cache failed to allocate (?P<bytes>\d+) bytes"),
    ("unnamed", r"Unpacked weight and bias were not registered with names"),
    ("loaded", r"Loaded packed weight cache: (?P<path>.*) \((?P<entries>\d+) entries\)"),
    ("opened_for_writing", r"Opened packed weight file for writing: (?P<path>.*)"),
    ("synced", r"Synced (?P<new>\d+) new regions \((?P<total>\d+) total\), (?P<mb>\d+) MB"),
    ("saved", r"Saved packed weight index: (?P<entries>\d+) entries at offset (?P<offset>\d+), "
              r"file_bytes=(?P<bytes>\d+)"),
))

# The failures, in the order a launch meets them, with what each means for the packs. A launch's
# reason is its first failure; without one it is what the cache did (loaded / wrote / nothing).
FAILURES: dict[str, str] = {
    "open_failed": "initialize_for_runtime: open(O_RDWR|O_CREAT) of the cache file failed; "
                   "no open file, every pack to heap",
    "flock_failed": "initialize_for_runtime: flock(LOCK_EX|LOCK_NB) failed (another process "
                    "holds the cache file); no open file, every pack to heap",
    "truncate0_failed": "initialize_for_runtime: ftruncate(0) of the cache file failed; no open "
                        "file, every pack to heap",
    "reserve_ftruncate_failed": "reserve_space: extending the cache file failed; the file is "
                                "closed and this and every later pack go to heap",
    "reserve_mmap_failed": "reserve_space: mmap of the cache file failed; the file is closed and "
                           "this and every later pack go to heap",
    "corrupt_index": "load_packed_cache: the index is corrupt; the file is rewritten",
    "index_extend_failed": "save_packed_index: extending the file for the index failed; the "
                           "packs are in the file but no index: the next launch cannot load it",
    "index_write_failed": "save_packed_index: writing the index failed; the packs are in the "
                          "file but no index: the next launch cannot load it",
    "fsync_failed": "save_packed_index: fsync failed (durability best effort)",
    "heap_alloc_failed": "reserve_space_heap: the heap allocation failed",
}


@dataclasses.dataclass(frozen=True)
class CacheEvent:
    event: str  # a PATTERNS name
    line: str
    errno: int | None
    fields: dict[str, str]


def events(lines: tuple[str, ...] | list[str]) -> list[CacheEvent]:
    """The cache's events in `lines` (a run's log), in order."""
    found = []
    for line in lines:
        for name, pattern in PATTERNS:
            m = pattern.search(line)
            if m:
                fields = {k: v for k, v in m.groupdict().items() if v is not None}
                code = fields.pop("errno", None)
                found.append(CacheEvent(name, line.strip(), int(code) if code else None, fields))
                break
    return found


def failures(lines: tuple[str, ...] | list[str]) -> list[str]:
    """The cache's failure branches in `lines` as `event errno`, in order ("truncate0_failed
    5 (EIO)"): what a replay compares with its recorded run."""
    return [f"{e.event} {errno_name(e.errno)}" for e in events(lines) if e.event in FAILURES]


def errno_name(code: int | None) -> str:
    """`28 (ENOSPC)`; Linux numbering, which Android shares."""
    if code is None:
        return "none"
    if code == errno_names.EAGAIN:  # flock's LOCK_NB says it as EWOULDBLOCK, the same number
        return f"{code} (EWOULDBLOCK)"
    return f"{code} ({errno_names.errorcode.get(code, '?')})"


@dataclasses.dataclass(frozen=True)
class LaunchReason:
    """Why one launch's packs went where they went, in the runtime's words."""

    branch: str  # e.g. "open_failed", "loaded_from_disk", "fresh_write", "cache_off"
    errno: int | None
    reason: str  # one sentence
    loaded_entries: int | None  # entries of a loaded index (partial / foreign caches)
    saved_entries: int | None  # entries of the index this launch wrote

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def launch_reason(lines: tuple[str, ...] | list[str], requested: str | None, enabled: bool,
                  placement: str, earlier_inits: int = 0) -> LaunchReason:
    """The branch one launch took: its first failure, else what the cache did.

    `requested`: the packed_cache_path the load asked for ("" for an empty path, None when no
    path was given); `enabled`: weight_cache_enabled; `placement`: the measured classification;
    `earlier_inits`: loads on the same path earlier in the same process (the log is the whole
    process's, so a later module's open failure is told apart from the first one's).
    """
    found = events(lines)
    opens = [e for e in found if e.event in ("open_failed", "flock_failed")]
    if enabled and requested and earlier_inits and len(opens) > 1:
        # The fd, once open, stays open for the process's life (save_packed_index keeps it), so
        # a later init on the path opens again only when an earlier one was left without it;
        # with that init's entries in memory it takes initialize_for_runtime's reopen branch
        # (open_locked(O_RDWR), no O_CREAT: a missing file is ENOENT there).
        last = opens[-1]
        return LaunchReason("reopen_failed", last.errno, "initialize_for_runtime: entries of an "
                            "earlier load in this process are in memory and reopening the cache "
                            f"file O_RDWR failed (errno {errno_name(last.errno)}); no open file, "
                            "every new pack to heap", None, None)
    loaded = next((int(e.fields["entries"]) for e in found if e.event == "loaded"), None)
    saved = next((int(e.fields["entries"]) for e in reversed(found) if e.event == "saved"), None)
    failure = next((e for e in found if e.event in FAILURES), None)
    seeds = [e for e in found if e.event == "seed_mismatch"]

    def reason(branch: str, text: str, code: int | None = None) -> LaunchReason:
        return LaunchReason(branch, code, text, loaded, saved)

    if not enabled:
        return reason("cache_off", "weight cache disabled: packs to heap (the baseline)")
    if requested == "":
        return reason("empty_path", "weight cache enabled with an empty packed_cache_path: "
                      "initialize_for_runtime keeps no file, every pack to heap, nothing logged")
    if requested is None:
        return reason("no_path", "no packed_cache_path given: packs to heap")
    if failure is not None and loaded is not None and failure.event in ("open_failed",
                                                                        "flock_failed"):
        return reason("loaded_reopen_failed", f"an index of {loaded} entries loaded (read only); "
                      f"reopening the file for writing failed (errno {errno_name(failure.errno)}):"
                      " hits are mapped, misses go to heap", failure.errno)
    if failure is not None:
        text = f"{FAILURES[failure.event]} (errno {errno_name(failure.errno)})"
        return reason(failure.event, text, failure.errno)
    if any(e.event == "unnamed" for e in found) and placement == "fallback":
        return reason("unnamed_constant", "look_up: the weights of a pack carry no name "
                      "(last_lookup_unnamed_), so reserve_space packs it into heap, never into "
                      "the file, on every launch")
    if seeds:
        return reason("seed_mismatch", f"{len(seeds)} cached entries have another XNNPACK seed "
                      "(an XNNPACK upgrade): treated as misses, re-packed into heap "
                      "(loaded_from_disk_), never replaced in the file")
    first_use = next((e.event for e in found if e.event in ("loaded", "opened_for_writing")),
                     None)
    if first_use == "opened_for_writing":  # wrote the file; a later module may load it again
        return reason("fresh_write", "no usable index: the file was truncated and packed into "
                      "afresh" + (f"; index of {saved} entries saved" if saved is not None else ""))
    if loaded is not None and placement == "fallback":
        return reason("loaded_from_disk", f"an index of {loaded} entries loaded; every miss "
                      "goes to heap (loaded_from_disk_) and is never added to the file")
    if loaded is not None:
        return reason("loaded", f"an index of {loaded} entries loaded and mapped")
    if any(e.event == "opened_for_writing" for e in found):
        return reason("fresh_write", "no usable index: the file was truncated and packed into "
                      "afresh" + (f"; index of {saved} entries saved" if saved is not None else ""))
    return reason("unexplained", "the cache logged nothing that explains this launch")
