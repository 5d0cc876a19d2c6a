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
from collections.abc import Iterable, Iterator


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
