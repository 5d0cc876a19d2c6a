"""The program cache: what `inspect_program` answered for a `.pte`, kept per content.

Reading a program costs a child process that imports executorch (seconds, tens of seconds on a
loaded host), so an answer is kept and never read twice. It depends on the program's bytes and
on the code that read them: the harness's reader (`harness/programs/pte.py`: the facts it
extracts and their JSON format) and executorch's deserializer and QNN compile-spec schema (its
release). An entry is therefore named by the content's sha256 *and* a key over the reader's
source, the harness version and the executorch package a child imports, so a harness change or
another executorch never reuses an answer a different reader gave. Writes are atomic (a temp
file renamed into place): concurrent pytest-xdist workers and sessions never read half an entry.
Errors are not cached: a bad file is re-read (and named) until it is fixed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import json
import os
import tempfile
from pathlib import Path

import harness
from harness.cache import cache_root, digest
from harness.errors import ModelError
from harness.programs import pte
from harness.programs.pte import ProgramInfo

CACHE_DIR = "programs"


def _executorch_identity() -> list[str]:
    """Where the executorch package a child would import lives, its distribution version and
    its version.py (the release and git revision), read from files without importing it."""
    parts: list[str] = []
    try:
        parts.append(importlib.metadata.version("executorch"))
    except importlib.metadata.PackageNotFoundError:
        parts.append("no executorch distribution")
    spec = importlib.util.find_spec("executorch")
    for location in (spec.submodule_search_locations or []) if spec else []:
        parts.append(str(location))
        try:
            parts.append((Path(location) / "version.py").read_text())
        except OSError:
            parts.append("no version.py")
    return parts


@functools.cache
def reader_key() -> str:
    """A key over everything besides the program's bytes that can change an answer: the
    reader's source, the program JSON format, the harness version and executorch's identity."""
    return digest([Path(pte.__file__).read_bytes(), str(pte.JSON_FORMAT), harness.__version__,
                   *_executorch_identity()])


def entry_path(sha256: str) -> Path:
    """The cache file of the program whose bytes have `sha256`, for this reader."""
    return cache_root() / CACHE_DIR / f"{sha256}-{reader_key()}.json"


def load(path: Path, sha256: str) -> ProgramInfo | None:
    """The cached answer for `path` (whose bytes have `sha256`), or None: absent, damaged or
    of another format, each a miss to read again. The same bytes may live under many names:
    the answer carries the caller's `path`."""
    try:
        info = ProgramInfo.from_json(json.loads(entry_path(sha256).read_text()))
    except (OSError, ValueError, KeyError, TypeError, ModelError):
        return None
    if info.sha256 != sha256:
        return None
    return dataclasses.replace(info, path=path)


def store(info: ProgramInfo) -> None:
    """Write `info`'s entry atomically (temp file + rename)."""
    target = entry_path(info.sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(info.to_json(), handle, indent=1)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
