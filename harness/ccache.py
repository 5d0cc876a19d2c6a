"""ccache in front of every compiler the harness runs, with one cache under the harness cache.

Why: the same sources are compiled again whenever a build lands in a new directory (a test's
fresh runner cache, the CI's own cache after setup's build, another runtime's interposer
entry), and those compiles were most of a cold run's compiler CPU. ccache (Debian `ccache`)
hands back the object a compiler made before for the same preprocessed input and flags, so a
build's outputs are what the compiler makes and no build key changes with it.

Its directory is ``<cache_root>/ccache`` (CCACHE_DIR in the build's environment), not a
per-build one: a test that builds into its own runner cache hits what setup's build put
there, and an empty EXECUTORCH_HIL_CACHE (a cold CI) starts cold. No CCACHE_BASEDIR: every
compile line names its source and headers by absolute path and its object relative to the
build directory, and without -g ccache leaves the working directory out of the hash, so two
build directories of one source already hit; a base directory would make the sources'
paths relative to each build directory, which then differ.

The CMake builds (every runner target, the Android wrapper) get it as their compilers'
launcher (harness.runner.builds.cmake). The one-line `gcc -shared -o lib.so src.c` builds (the
interposer, its dlopen shim, the crash reporter, the backend-registry wrapper) do not: ccache
caches compiles, not links, and counts such a line "called_for_link" and runs the compiler as
is; each is built once per harness cache and costs 0.2-2.4 s of CPU.

Without ccache every compiler runs directly, as before; CCACHE_DISABLE=1 in the environment
does the same with it installed (ccache reads it).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from harness.cache import cache_root

PACKAGE = "ccache"
"""The Debian package (scripts/setup.sh and .ci/run install it)."""
MAX_SIZE = "2G"
"""CCACHE_MAXSIZE: ccache evicts the oldest objects above it (a runner build is ~30 MB)."""

_log = logging.getLogger("harness.ccache")
_said_missing = False


def find_ccache() -> Path | None:
    """ccache on PATH, or None (said once in the log: builds then run their compilers
    directly)."""
    global _said_missing
    found = shutil.which("ccache")
    if found is None and not _said_missing:
        _said_missing = True
        _log.info("ccache not found: compiling without a compiler cache "
                  "(apt-get install %s)", PACKAGE)
    return Path(found) if found else None


def ccache_dir() -> Path:
    """Where every build's compiler cache lives: ``ccache/`` under the harness cache."""
    return cache_root() / "ccache"


def cmake_definitions() -> list[str]:
    """The CMake definitions that put ccache in front of the C and C++ compilers, or none."""
    found = find_ccache()
    if found is None:
        return []
    return [f"-DCMAKE_C_COMPILER_LAUNCHER={found}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={found}"]


def environment() -> dict[str, str] | None:
    """The environment of a build process: this one's with CCACHE_DIR (under the harness
    cache) and CCACHE_MAXSIZE, or None (inherit it as is) without ccache."""
    if find_ccache() is None:
        return None
    directory = ccache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "CCACHE_DIR": str(directory), "CCACHE_MAXSIZE": MAX_SIZE}
