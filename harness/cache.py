"""On-disk cache locations and a cross-process lock.

Compiled models, the QNN interposer and the native runner are built once and reused across
sessions and pytest-xdist workers, so every producer takes the same file lock before it writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def cache_root() -> Path:
    """`$EXECUTORCH_HIL_CACHE`, else `~/.cache/executorch-hil`."""
    root = os.environ.get("EXECUTORCH_HIL_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "executorch-hil"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if needed) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def digest(parts: Iterable[bytes | str]) -> str:
    """Short sha256 over `parts`, each length-prefixed so boundaries count."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


def file_sha256(path: Path) -> str:
    """Full sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_SHA_PREFIX = "sha256:"


def build_record(files: Iterable[Path]) -> str:
    """Lines for a build's marker that record each output's sha256 and whether it is
    executable, so a later use checks the files themselves and not the marker alone
    (verify_build)."""
    return "".join(f"{_SHA_PREFIX}{p.name}={file_sha256(p)}:{int(os.access(p, os.X_OK))}\n"
                   for p in files)


def verify_build(marker: Path, files: Iterable[Path]) -> str:
    """What is wrong with a cached build whose `marker` (a `key=value` file holding
    build_record's lines) says it is done: "" when every file has the sha256 and executable
    bit recorded, else the first problem, naming the file. A marker of an older harness, with
    no sha256 recorded, gets them recorded now from files that exist, are not empty and are as
    executable as a build leaves them (the shape `chmod -x` or an emptied file breaks)."""
    try:
        text = marker.read_text()
    except OSError as exc:
        return f"its marker {marker} cannot be read ({exc.strerror})"
    recorded = {}
    for line in text.splitlines():
        if line.startswith(_SHA_PREFIX) and "=" in line:
            name, _, value = line[len(_SHA_PREFIX):].partition("=")
            recorded[name] = value
    files = list(files)
    for path in files:
        if not path.is_file():
            return f"{path} is missing"
        if path.name not in recorded:
            if path.stat().st_size == 0:
                return f"{path} is empty"
            if path.suffix != ".so" and not os.access(path, os.X_OK):
                return f"{path} is not executable"
            continue
        sha, _, executable = recorded[path.name].partition(":")
        if executable == "1" and not os.access(path, os.X_OK):
            return f"{path} is not executable any more"
        actual = file_sha256(path)
        if actual != sha:
            return (f"{path} has sha256 {actual[:16]}, not the {sha[:16]} recorded at build "
                    "time (truncated or overwritten)")
    missing = [p for p in files if p.name not in recorded]
    if missing:
        with contextlib.suppress(OSError), open(marker, "a") as handle:
            handle.write(build_record(missing))
    return ""


class CacheRepairWarning(UserWarning):
    """A cached build or entry was found damaged and is rebuilt (pytest's warnings summary)."""


def rebuild_notice(message: str, stacklevel: int = 3) -> None:
    """Say that a damaged cache entry, named in `message`, is rebuilt: a warning in pytest's
    summary and the log, so a repair is never silent and never blamed on the runtime.
    `stacklevel` as warnings.warn's: by default the warning names the caller's caller."""
    import logging
    import warnings

    logging.getLogger("harness.cache").warning("%s", message)
    warnings.warn(message, CacheRepairWarning, stacklevel=stacklevel)


BUILD_MARKER = "build.ok"


def cached_build(entry: Path, outputs: Sequence[Path], build: Callable[[], str], what: str,
                 force: bool = False, preflight: Callable[[], None] | None = None,
                 adopt_unmarked: bool = False) -> None:
    """Make sure the build cached in the directory `entry` is done and sound, running `build`
    when it is not: one sequence for every build the harness caches, so each is safe from
    several processes at once and a damaged one is never used nor silently replaced.

    Done means `entry/build.ok` exists and verify_build finds `outputs` as recorded. Otherwise,
    under the lock `<entry>.lock`: checked again (another process may have built or repaired it
    while this one waited), a damaged build is announced (rebuild_notice: "the cached `what` is
    damaged: ...") unless `force` asked for the rebuild, the marker is removed, `build()` runs
    and its return value (`key=value` lines, or "") becomes the new marker, followed by the
    outputs' build_record. `preflight` runs before the lock, only when a build may be needed
    (a missing tool is then its own error, not a notice). `adopt_unmarked`: an output left with
    no marker by an older harness is checked for shape and recorded rather than rebuilt."""
    marker = entry / BUILD_MARKER
    if not force and marker.is_file() and not verify_build(marker, outputs):
        return
    if preflight is not None:
        preflight()
    with file_lock(entry.parent / f"{entry.name}.lock"):
        if adopt_unmarked and not marker.is_file() and all(p.exists() for p in outputs):
            marker.write_text("")
        problem = verify_build(marker, outputs) if marker.is_file() else ""
        if not force and marker.is_file() and not problem:
            return
        if problem and not force:
            rebuild_notice(f"the cached {what} is damaged: {problem}; rebuilding it",
                           stacklevel=4)  # named at the caller of the build function
        marker.unlink(missing_ok=True)
        header = build()
        marker.write_text(header + build_record(outputs))


MEMO_DIR = "memo"
"""Under cache_root(): values `memo` computed once for every later process."""


def memo(namespace: str, key: Iterable[bytes | str], compute: Callable[[], T]) -> T:
    """`compute()`, computed once per `key` for every process that asks later: pickled under
    `<cache>/memo/<namespace>/<digest of key>.memo` (a sha256 of the pickle, then the pickle).

    For work each pytest session (and each xdist worker) would otherwise redo at start-up with
    the same inputs: the key must hold everything the value depends on (a file's bytes, the
    source of the code that derives it), so a changed input is a new entry, never a stale
    value. An exception from `compute` is not stored (an error is raised again next time). An
    entry that cannot be read back is recomputed and replaced, with a rebuild_notice; one that
    cannot be written (a full or read-only cache, or none) costs the next process the work
    again, nothing else."""
    import pickle

    try:
        directory = cache_root() / MEMO_DIR / namespace
    except OSError:  # no cache to keep it in (a read-only home): the work, every time
        return compute()
    path = directory / f"{digest(key)}.memo"
    try:
        data = path.read_bytes()
    except OSError:
        data = None
    if data is not None:
        # sha256 of the pickle, then the pickle: a damaged entry is told, never unpickled
        check, payload = data[:32], data[32:]
        try:
            if hashlib.sha256(payload).digest() != check:
                raise ValueError("checksum mismatch")
            return pickle.loads(payload)
        except Exception as exc:  # noqa: BLE001 - any damage: recomputed, and said
            rebuild_notice(f"the cached {namespace} entry {path} is damaged ({exc}); "
                           "computing it again")
    value = compute()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{path.name}.{os.getpid()}"
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            tmp.write_bytes(hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, path)  # whole or absent: a concurrent reader never sees half of it
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        pass
    return value
