"""Finding the tools every runner build runs: cmake (3.28 or newer) and ninja, preferably the
PyPI packages of the Python running the harness, the host's C++ compiler, and the nlohmann/json
headers.

Its own module because every target, the session's runner choice and the C++ export
(`harness.export.cpp`) ask the same questions, and a missing tool must be reported with the
same words (what to install) wherever it is found missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

MIN_CMAKE = (3, 28)
"""The wheel's imported CMake targets are only defined from CMake 3.28 on."""

NLOHMANN_JSON_PACKAGE = "nlohmann-json3-dev"
"""Debian package of the nlohmann/json headers every runner build includes."""
NLOHMANN_JSON_DIRS = (Path("/usr/local/include"), Path("/usr/include"))
"""Where the nlohmann/json headers are looked for first (then the Python prefix's include)."""


def _python_bin_dirs() -> list[Path]:
    dirs = [Path(sys.executable).parent]
    resolved = Path(sys.executable).resolve().parent
    if resolved not in dirs:
        dirs.append(resolved)
    return dirs


def _pypi_tool_dir(module: str, attr: str) -> Path | None:
    """The bin dir a PyPI tool package (cmake, ninja) reports, without
    importing anything when it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        mod = __import__(module)
        value = getattr(mod, attr, None)
    except Exception:  # noqa: BLE001 - a broken tool package is just absent
        return None
    return Path(value) if value else None


def _parse_version(text: str) -> tuple[int, ...] | None:
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


@cache
def _cmake_version(cmake: str) -> tuple[int, ...] | None:
    """Version of the cmake at ``cmake``. For the PyPI cmake (the entry point
    next to sys.executable or the package's own binary) it comes from the
    package metadata, sparing a process start per session."""
    import importlib.metadata

    path = Path(cmake)
    pypi_dirs = [*_python_bin_dirs(), _pypi_tool_dir("cmake", "CMAKE_BIN_DIR")]
    if path.parent in pypi_dirs:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = _parse_version(importlib.metadata.version("cmake"))
            if version is not None:
                return version
    try:
        out = subprocess.run(
            [cmake, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\S+)", out)
    return _parse_version(m.group(1)) if m else None


def _find_tool(name: str, module: str, attr: str) -> Path | None:
    """``name`` next to sys.executable (the PyPI package's entry point), then
    the PyPI package's own bin dir, then PATH."""
    for d in _python_bin_dirs():
        cand = d / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    tool_dir = _pypi_tool_dir(module, attr)
    if tool_dir is not None:
        cand = tool_dir / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(name)
    return Path(found) if found else None


def find_cmake() -> Path | None:
    return _find_tool("cmake", "cmake", "CMAKE_BIN_DIR")


def find_ninja() -> Path | None:
    return _find_tool("ninja", "ninja", "BIN_DIR")


def find_cxx() -> Path | None:
    """The C++ compiler CMake will pick for the host: $CXX, else c++/g++/clang++."""
    env = os.environ.get("CXX")
    if env:
        first = shlex.split(env)[0]
        found = shutil.which(first)
        return Path(found) if found else None
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


def tool_or_name(tool: Path | None, name: str) -> str:
    """`tool`'s path, or the bare `name` (left to PATH) when it was not found."""
    return str(tool) if tool is not None else name


def build_tools() -> tuple[str, str]:
    """(cmake, ninja) as the runner's builds run them: the PyPI tools where found, else the
    bare names."""
    return tool_or_name(find_cmake(), "cmake"), tool_or_name(find_ninja(), "ninja")


def cmake_ninja_problem() -> str:
    """"" when a new enough cmake and a ninja are there, else what to install."""
    cmake = find_cmake()
    if cmake is None:
        return "cmake not found: pip install 'cmake>=3.28'"
    version = _cmake_version(str(cmake))
    if version is None or version < MIN_CMAKE:
        shown = ".".join(map(str, version)) if version else "unknown"
        return (
            f"cmake at {cmake} is version {shown}; the executorch CMake package needs "
            ">= 3.28: pip install 'cmake>=3.28' (into the Python running the harness)"
        )
    if find_ninja() is None:
        return "ninja not found: pip install ninja"
    return ""


def nlohmann_json_include_dir() -> Path | None:
    """The directory holding ``nlohmann/json.hpp`` (/usr/local/include, /usr/include, then
    the Python prefix's include), or None. Header-only, so the host's copy serves the
    cross builds too."""
    for d in (*NLOHMANN_JSON_DIRS, Path(sys.prefix) / "include"):
        if (d / "nlohmann" / "json.hpp").is_file():
            return d
    return None


def nlohmann_json_problem() -> str:
    """"" when the nlohmann/json headers are there, else what to install."""
    if nlohmann_json_include_dir() is not None:
        return ""
    return (f"the nlohmann/json headers are not installed (no nlohmann/json.hpp in "
            f"{' or '.join(map(str, NLOHMANN_JSON_DIRS))}): apt-get install "
            f"{NLOHMANN_JSON_PACKAGE} (scripts/setup.sh does it when run as root or with sudo)")
