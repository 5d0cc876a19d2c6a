"""Process memory readings: `/proc/<pid>/smaps_rollup`, per-file mappings and dma-buf fds.

The same parsers serve the Python runner (reading its own /proc/self) and the adb device
(reading a phone's /proc/<pid> through `adb shell cat`), so readings mean the same everywhere.
Values are kB as the kernel prints them, except dma-buf sizes, which are bytes.
"""

from __future__ import annotations

from typing import Any

import ctypes
import ctypes.util
import functools
import os
import re

# glibc raises its mmap threshold to the size of each large block freed; blocks of that size
# then come from the heap and stay resident after they are freed, so RSS steps up by 5-16 MB in
# whichever load/destroy cycle the allocator happens to pick (measured with S4 on the loopback
# device: anonymous memory 22 MB -> 39 MB in cycle 2 in some runs, in cycle 3 in others). A fixed
# threshold returns freed large blocks to the kernel, so a reading is what the runtime holds
# (the same runs: 22236 -> 22316 -> 22316 kB). Bionic and other allocators ignore the variable.
ALLOCATOR_ENV: dict[str, str] = {"MALLOC_MMAP_THRESHOLD_": "131072"}

_FIELD = re.compile(r"^([A-Za-z_]+):\s+(\d+) kB")
_MAPPING = re.compile(r"^[0-9a-f]+-[0-9a-f]+\s+\S+\s+\S+\s+\S+\s+\d+\s*(.*)$")


def parse_rollup(text: str) -> dict[str, int]:
    """`Rss`, `Pss`, `Anonymous`, `Private_Dirty`, ... from smaps_rollup text."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match:
            out[match.group(1)] = int(match.group(2))
    return out


def parse_mappings(text: str, paths: list[str]) -> dict[str, dict[str, int]]:
    """Sum smaps fields over every mapping whose path is one of `paths`."""
    sums: dict[str, dict[str, int]] = {p: {} for p in paths}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        header = _MAPPING.match(line)
        if header:
            path = header.group(1).strip()
            current = sums.get(path)
            continue
        if current is not None:
            match = _FIELD.match(line)
            if match:
                current[match.group(1)] = current.get(match.group(1), 0) + int(match.group(2))
    return sums


def parse_fdinfo(texts: list[str]) -> dict[str, int]:
    """Count and total size of dma-buf fds (fdinfo entries that carry `exp_name`)."""
    count = total = 0
    for text in texts:
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if "exp_name" in fields:
            count += 1
            total += int(fields.get("size", "0").strip() or 0)
    return {"count": count, "bytes": total}


def _read(path: str) -> str:
    """A /proc file's text: os.read until the end, no buffered file object per reading."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "surrogateescape")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")]


@functools.cache
def _mallinfo2() -> Any:
    """glibc's mallinfo2 (2.33+), or None: the C library's own count of malloc'd bytes."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    fn.argtypes = []
    return fn


def read_heap() -> dict[str, int] | None:
    """malloc's bytes in use in its arenas and in mmap'd chunks, and its arena size, as the
    native runner reports them; None where the C library has no mallinfo2. A leak of runtime
    objects grows `in_use` without the page-granular noise of Rss."""
    fn = _mallinfo2()
    if fn is None:
        return None
    mi = fn()
    return {"in_use": mi.uordblks, "mmapped": mi.hblkhd, "arena": mi.arena}


def read_self(watch: list[str]) -> dict[str, Any]:
    """Memory of the calling process, in the runner protocol's `memory` shape."""
    rollup = parse_rollup(_read("/proc/self/smaps_rollup"))
    mappings = parse_mappings(_read("/proc/self/smaps"), watch) if watch else {}
    infos = []
    for name in os.listdir("/proc/self/fdinfo"):
        try:
            infos.append(_read(f"/proc/self/fdinfo/{name}"))
        except OSError:
            pass
    memory: dict[str, Any] = {"rollup": rollup, "mappings": mappings,
                              "dmabuf": parse_fdinfo(infos)}
    heap = read_heap()
    if heap is not None:
        memory["heap"] = heap
    return memory
