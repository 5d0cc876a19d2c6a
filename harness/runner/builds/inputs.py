"""What a runner build is built from and keyed by, and where builds are cached.

The runner's sources (`harness/runner/native`) and the runtime under test (`harness.runtime`:
the installed wheel or `--executorch-prefix`, by version, path and the content of its
libraries) go into every cached build's key, so a changed source or a rebuilt runtime gets a
new build while an unchanged one is found without running any tool.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
from functools import cache
from pathlib import Path

from harness.cache import cache_root, memo

SOURCE_SUFFIXES = (".cpp", ".h", ".txt")
"""The files of the runner's source directory a build's key covers."""


def runner_source_dir() -> Path:
    """The runner's CMake source directory (``harness/runner/native``)."""
    return Path(__file__).resolve().parent.parent / "native"


def default_cache_root() -> Path:
    """Where runner builds are cached: ``runner/`` under the harness cache
    (``$EXECUTORCH_HIL_CACHE``, else ``~/.cache/executorch-hil``)."""
    return cache_root() / "runner"


def sources_digest(src: Path) -> str:
    """sha256 over the relative names and bytes of the runner's sources in `src`."""
    h = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in SOURCE_SUFFIXES):
        h.update(str(path.relative_to(src)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def executorch_package_dir() -> Path | None:
    """The CMake package root of the runtime under test (``harness.runtime``): the
    ``--executorch-prefix`` directory, else the installed ``executorch`` package directory
    holding ``share/cmake/executorch-config.cmake``; None when there is none."""
    from harness.runtime import current

    runtime = current()
    if runtime.from_prefix:
        return runtime.cmake_prefix
    spec = importlib.util.find_spec("executorch")
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    for loc in locations:
        if (Path(loc) / "share" / "cmake" / "executorch-config.cmake").is_file():
            return Path(loc)
    return None


@cache
def _libraries_digest(lib_dir: Path, stamp: tuple) -> str:
    """sha256 over the names and bytes of a runtime's libraries (`stamp`, their names, sizes
    and mtimes, keys the in-process cache and the harness cache): a rebuilt prefix at the same
    path and version is another runtime, so it gets another runner build. Reading and hashing
    the wheel's libraries (about 60 ms) was every session's, for the same answer."""
    return memo("runtime-libraries", [str(lib_dir), repr(stamp)],
                lambda: _hash_libraries(lib_dir, stamp))


def _hash_libraries(lib_dir: Path, stamp: tuple) -> str:
    h = hashlib.sha256()
    for name, _size, _mtime in stamp:
        h.update(name.encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(hashlib.sha256((lib_dir / name).read_bytes()).digest())
    return h.hexdigest()


def runtime_libraries_digest(lib_dir: Path | None) -> str:
    """The content digest of the shared and static libraries in `lib_dir` ("" when none)."""
    if lib_dir is None or not lib_dir.is_dir():
        return ""
    stamp = []
    for path in sorted(lib_dir.iterdir()):
        if path.is_file() and (".so" in path.name or path.suffix == ".a"):
            st = path.stat()
            stamp.append((path.name, st.st_size, st.st_mtime_ns))
    return _libraries_digest(lib_dir, tuple(stamp))
