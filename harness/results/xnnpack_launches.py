"""A packed-weight cache judged across launches: does its fallback heal or is it permanent?

One launch cannot tell a cache that is being written (it packs, then later launches map it)
from one that will be re-packed on every launch for ever (a partial or foreign index loads and
every miss goes to heap, `loaded_from_disk_`; an index that cannot be written). N launches of
the same program on the same path, with the file's size and digest before and after each, can:

- `reused`: a launch after the first maps its packs from the file (heap < HEAP_LIMIT);
- `heals`: an early launch fell back (heap) and a later one maps from the file;
- `permanent`: every launch packs again (into heap, or into a file it can never index),
  naming the branch, the fraction and whether the file changes;
- `mixed`: anything else (said as it is).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any, TypeVar

from harness.results.xnnpack import HEAP_LIMIT, MIB, CacheLoad
from harness.results.xnnpack_log import errno_name

# What a branch is called in a verdict (the reason's branch -> a few words).
BRANCH_WORDS = {
    "cache_off": "no cache",
    "empty_path": "cache enabled with an empty path",
    "no_path": "no cache path",
    "open_failed": "open(O_CREAT) of the cache file failed",
    "flock_failed": "another process holds the cache file",
    "truncate0_failed": "ftruncate(0) of the cache file failed",
    "reserve_ftruncate_failed": "extending the cache file failed (reserve_space ftruncate)",
    "reserve_mmap_failed": "mapping the cache file failed (reserve_space mmap)",
    "index_extend_failed": "the index could not be written (ftruncate for the index)",
    "index_write_failed": "the index could not be written",
    "seed_mismatch": "seed mismatch (packs of another XNNPACK)",
    "loaded_reopen_failed": "a read-only cache file",
    "reopen_failed": "reopening the cache file in the same process failed",
    "unnamed_constant": "constants without a name (never cached)",
    "fresh_write": "fresh write",
    "loaded": "cache loaded",
}


# Branches of a launch that used the file as meant (a read-only full cache maps every pack).
HEALTHY = ("fresh_write", "loaded", "loaded_reopen_failed", "")
# Branches whose launch truncates the file and packs into it afresh.
FRESH_WRITES = ("fresh_write", "index_write_failed", "index_extend_failed", "fsync_failed")


@dataclasses.dataclass(frozen=True)
class FileState:
    """The cache file as seen from outside: size in bytes (None: absent) and a digest."""

    size: int | None
    digest: str | None = None

    def describe(self) -> str:
        return "absent" if self.size is None else f"{self.size} bytes"


@dataclasses.dataclass(frozen=True)
class Launch:
    load: CacheLoad
    before: FileState
    after: FileState

    @property
    def repacked_bytes(self) -> int:
        """Bytes this launch packed again: its heap bytes, plus what it packed into the file:
        all it mapped when it wrote the file afresh, else what the file grew by (a re-pack
        added to a loaded file)."""
        if self.load.branch in FRESH_WRITES:
            into_file = self.load.mapped_bytes
        else:
            into_file = max(0, (self.after.size or 0) - (self.before.size or 0))
        return max(0, self.load.heap_bytes) + into_file


@dataclasses.dataclass(frozen=True)
class CacheStory:
    name: str
    cache_path: str | None
    launches: tuple[Launch, ...]
    packs: int | None  # packed entries the program has, when known
    verdict: str  # "reused" | "heals" | "permanent" | "mixed"
    branch: str  # the branch the fallback launches took ("" when none fell back)
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cache_path": self.cache_path, "verdict": self.verdict,
                "branch": self.branch, "packs": self.packs, "text": self.text,
                "launches": [{"placement": launch.load.classification,
                              "branch": launch.load.branch, "errno": launch.load.errno,
                              "reason": launch.load.reason,
                              "loaded_entries": launch.load.loaded_entries,
                              "heap_bytes": launch.load.heap_bytes,
                              "mapped_bytes": launch.load.mapped_bytes,
                              "repacked_bytes": launch.repacked_bytes,
                              "file_before": launch.before.size,
                              "file_after": launch.after.size,
                              "file_changed": launch.before != launch.after}
                             for launch in self.launches]}


def judge(name: str, launches: list[Launch], packs: int | None = None) -> CacheStory:
    """The verdict on `launches` (in order) of one program on one cache path."""
    if not launches:
        raise ValueError("judge needs at least one launch")
    weights = launches[0].load.weight_bytes
    limit = HEAP_LIMIT * weights
    repacked = [launch.repacked_bytes for launch in launches]
    placements = [launch.load.classification for launch in launches]
    first_fallback = next((launch.load for launch in launches
                           if launch.load.classification == "fallback"
                           or launch.load.branch not in HEALTHY), None)
    branch = first_fallback.branch if first_fallback else ""
    n = len(launches)
    changes = [launch.before != launch.after for launch in launches]
    if not any(changes[1:]) and n > 1:
        file_words = "the file never changes" if not changes[0] else \
            "the file is written once and never changes after"
    elif all(changes):
        file_words = "the file is rewritten on every launch"
    else:
        file_words = "the file changes on launches " + ", ".join(
            str(i + 1) for i, c in enumerate(changes) if c)
    if n > 1 and all(r >= limit for r in repacked):
        verdict = "permanent"
        least = min(repacked)
        every = "each" if max(repacked) - least < limit else "at least each"
        text = (f"{_what(launches, packs)}; {least / MIB:.1f} MiB re-packed on {every} of "
                f"{n} launches ({_where(launches)}); {file_words}: permanent")
    elif n > 1 and all(r < limit for r in repacked[1:]):
        healed = placements[0] == "fallback" or launches[0].load.branch not in HEALTHY
        verdict = "heals" if healed else "reused"
        text = (f"{_what(launches[:1], packs)} on launch 1 "
                f"({repacked[0] / MIB:.1f} MiB packed); launches 2..{n} map it "
                f"({', '.join(f'{r / MIB:.1f}' for r in repacked[1:])} MiB re-packed); "
                f"{file_words}: {verdict}")
    elif n > 1 and repacked[-1] < limit and first_fallback is not None:
        verdict = "heals"
        fell = [i + 1 for i, launch in enumerate(launches)
                if launch.load.classification == "fallback" or launch.load.branch not in HEALTHY]
        healed_at = next(i + 1 for i in range(n - 1, -1, -1)
                         if i == 0 or repacked[i - 1] >= limit)
        text = (f"{_what([launches[fell[0] - 1]], packs)} on launch "
                f"{', '.join(map(str, fell))}; re-packed per launch "
                f"{', '.join(f'{r / MIB:.1f}' for r in repacked)} MiB ({', '.join(placements)}); "
                f"from launch {healed_at} on the file serves every pack; {file_words}: heals")
    else:
        verdict = "mixed"
        text = (f"{_what(launches, packs)}; re-packed per launch "
                f"{', '.join(f'{r / MIB:.1f}' for r in repacked)} MiB "
                f"({', '.join(placements)}); {file_words}: mixed")
    return note_story(CacheStory(name, launches[0].load.cache_path, tuple(launches), packs,
                                 verdict, branch, text))


def _what(launches: list[Launch] | tuple[Launch, ...], packs: int | None) -> str:
    """The branch in words, with the fraction of an index that loaded."""
    load = next((launch.load for launch in launches if launch.load.branch not in ("", "loaded")),
                launches[0].load)
    if load.branch in ("loaded_from_disk", "loaded", "loaded_reopen_failed") and load.loaded_entries is not None:
        total = f" of {packs}" if packs else ""
        if 1 - load.heap_fraction < HEAP_LIMIT:  # nothing of this program's came from the file
            return (f"another model's cache: {load.loaded_entries} entries loaded, none of "
                    f"{f'the {packs} packs' if packs else 'the packs'} match")
        read_only = " (read-only file)" if load.branch == "loaded_reopen_failed" else ""
        if packs and load.loaded_entries < packs:
            return f"partial cache{read_only}: {load.loaded_entries}{total} packs loaded"
        return f"cache loaded{read_only}: {load.loaded_entries}{total} entries"
    words = BRANCH_WORDS.get(load.branch, load.branch or "unexplained")
    if load.errno is not None:
        words += f" (errno {errno_name(load.errno)})"
    return words


def _where(launches: tuple[Launch, ...] | list[Launch]) -> str:
    """Into heap, into the file, or both."""
    heap = all(launch.load.heap_bytes >= HEAP_LIMIT * launch.load.weight_bytes
               for launch in launches)
    return "into heap" if heap else "into a file never indexed" if all(
        launch.load.classification == "mapped" for launch in launches) else "into heap and file"


# Where the launches of a suite put their packs, from the runtime's words alone -------------------
def log_placement(branch: str) -> str:
    """"file" when the launch used the cache file as meant, "heap" when a branch sent its packs
    to the heap, "unexplained" otherwise (for programs too small to measure)."""
    if branch in HEALTHY[:-1]:
        return "file"
    return "unexplained" if branch in ("", "unexplained") else "heap"


@dataclasses.dataclass(frozen=True)
class SharedUse:
    """Which launches of a suite that share one cache path used the file, by their logs."""

    name: str
    cache_path: str
    launches: tuple[tuple[str, str, int | None], ...]  # (scenario, branch, errno)
    text: str

    @property
    def heap_launches(self) -> int:
        return sum(1 for _, branch, _ in self.launches if log_placement(branch) == "heap")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cache_path": self.cache_path,
                "verdict": "never-used" if all(log_placement(b) != "file"
                                               for _, b, _ in self.launches) else "shared",
                "branch": "", "packs": None, "text": self.text,
                "launches": [{"scenario": scenario, "placement": log_placement(branch),
                              "branch": branch, "errno": code, "heap_bytes": None,
                              "mapped_bytes": None, "repacked_bytes": None,
                              "file_changed": None}
                             for scenario, branch, code in self.launches]}


def shared_use(name: str, cache_path: str,
               launches: list[tuple[str, str, int | None]]) -> SharedUse:
    """Count the launches on one shared path that used the file and those that fell back."""
    by: dict[tuple[str, int | None], int] = {}
    for _, branch, code in launches:
        by[(branch, code)] = by.get((branch, code), 0) + 1
    used = sum(n for (branch, _), n in by.items() if log_placement(branch) == "file")
    parts = ", ".join(f"{branch}{f' errno {errno_name(code)}' if code is not None else ''}: {n}"
                      for (branch, code), n in sorted(by.items(), key=lambda kv: -kv[1]))
    text = (f"{used} of {len(launches)} launches on the shared cache used the file; "
            f"{len(launches) - used} did not ({parts})")
    if used == 0:
        text += "; the file was never used: the shared-cache case was not exercised"
    return note_story(SharedUse(name, cache_path, tuple(launches), text))


# Stories told during a test, for reports (harness.report.plugin collects them per test) ----------
Story = CacheStory | SharedUse
_story_sinks: list[list[Story]] = []


@contextlib.contextmanager
def collect_stories() -> Iterator[list[Story]]:
    """Every story judged inside the block."""
    sink: list[Story] = []
    _story_sinks.append(sink)
    try:
        yield sink
    finally:
        _story_sinks.remove(sink)


S = TypeVar("S", CacheStory, SharedUse)


def note_story(story: S) -> S:
    for sink in _story_sinks:
        sink.append(story)
    return story
