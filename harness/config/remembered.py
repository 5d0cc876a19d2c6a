"""A YAML file's validated value, computed once per content: every pytest session (and each
xdist worker, each `python -m harness` command) reads the simulator config, a SoC config and the
known-issues file, and parsing them with PyYAML's pure-Python loader (the one that bounds
nesting, `harness.config.schema`) and validating them with pydantic cost about 0.1 s of CPU
a session, for the same answer every time.

`remembered` keys the value (`harness.cache.memo`) by the file's path and text, by the source of
the code that reads it and by the installed pydantic and PyYAML: a changed file, reader or
library is read again, never served stale. A file that fails to read or validate is not
remembered: its error is raised again, by the reader, every time. Only the plain values the
harness uses are stored, so a session that reads nothing new imports neither pydantic nor PyYAML.
"""

from __future__ import annotations

import functools
import importlib.util
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from harness.cache import memo
from harness.config.paths import CONFIG_DIR

T = TypeVar("T")

_PACKAGE = Path(__file__).resolve().parents[1]
_LIBRARIES = ("pydantic", "pydantic_core", "yaml")
_CONFIG_DIR = CONFIG_DIR.resolve()


def remembered(path: Path, what: str, read: Callable[[Path, str | None], T],
               readers: Sequence[str]) -> T:
    """`read(path, text)` (which raises ConfigError for a bad file), or its value from the last
    time the same text was read by the same code. `what` names the kind of file; `readers` are
    the harness source files (relative to the package, "config/files.py") whose code decides the
    value. A path that is not a regular, readable file goes straight to `read`, whose error
    names it (a FIFO is never opened here: reading one would hang). Only the project's own
    files (under CONFIG_DIR) are remembered: every session reads those, while a test's or
    user's file elsewhere (a temporary directory's, each run another path) would only add
    entries no later session asks for."""
    if not _projects(path):
        return read(path, None)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return read(path, None)
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return read(path, None)
    return memo("validated-files", [what, str(path), text, _code_stamp(tuple(readers))],
                lambda: read(path, text))


def _projects(path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(_CONFIG_DIR)
    except (OSError, RuntimeError):  # a symlink loop: read, and let the reader say so
        return False


@functools.cache
def _code_stamp(readers: tuple[str, ...]) -> str:
    """The readers' source text and the libraries' installed files (path, size, mtime), once
    per process."""
    parts = []
    for name in readers:
        try:
            parts.append(f"{name}\0{(_PACKAGE / name).read_text()}")
        except OSError:
            parts.append(f"{name}\0(unreadable)")
    for library in _LIBRARIES:
        spec = importlib.util.find_spec(library)
        origin = spec.origin if spec is not None else None
        try:
            st = Path(origin).stat() if origin else None
        except OSError:
            st = None
        parts.append(f"{library}\0{origin}\0{st.st_size if st else ''}\0"
                     f"{st.st_mtime_ns if st else ''}")
    return "\n".join(parts)
