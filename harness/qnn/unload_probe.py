"""Whether a QNN library can be unloaded at all: opened, closed, and then not resident.

The runtime dlcloses libQnnHtp.so on a full teardown. The interposer that stands in for it may
go with it only when the real library goes too: a real library left resident answers the next
dlopen("libQnnHtp.so") by its soname, past the interposer, and that load runs without the ABI
bridge and the trace. QAIRT 2.49 and 2.51's x86_64 libQnnHtp.so stay resident after dlclose
(their thread-local state keeps them), so there the interposer pins itself. The probe runs in a
child process (it loads the library) once per library file; its answer is cached.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.cache import cache_root, digest

_PROBE = """
import ctypes, _ctypes, os, sys
path = sys.argv[1]
handle = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)._handle
_ctypes.dlclose(handle)
try:
    ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    print("resident")
except OSError:
    print("unloaded")
"""


@functools.cache
def library_unloads(path: Path, lib_dirs: tuple[Path, ...] = ()) -> bool:
    """True when `path`, opened and closed in a fresh process, is no longer loaded; False when
    it stays resident or the probe cannot tell (the safe answer: the interposer then pins)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    key = digest([str(path).encode(), str(stat.st_size).encode(), str(stat.st_mtime_ns).encode()])
    cached = cache_root() / "unload-probe" / f"{key}.json"
    try:
        return bool(json.loads(cached.read_text())["unloads"])
    except (OSError, ValueError, KeyError):
        pass
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
        [*map(str, lib_dirs), os.environ.get("LD_LIBRARY_PATH", "")])}
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], env=env,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False
    answer = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
    if answer not in (["resident"], ["unloaded"]):
        return False
    unloads = answer == ["unloaded"]
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps({"path": str(path), "unloads": unloads}))
    return unloads
