"""A cap on what the harness keeps of a runner's output, so that a runtime stuck in a log loop
cannot take the host down: every path that reads a runner's stdout, stderr or QNN trace keeps
at most `limit_bytes()` of each (its first and last halves), notes how much was written, and
the run's verdict says "output limit reached".

Held whole, a 200 MB flood took pytest to 1.43 GB (the bytes, their decoded text, the lines
split from it, the artifacts' copy). The limit is per stream and run: 16 MiB by default,
`EXECUTORCH_HIL_OUTPUT_LIMIT_MB` to change it. The head keeps the first steps' events, the
tail the last ones and the runtime's last words.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path


LIMIT_ENV = "EXECUTORCH_HIL_OUTPUT_LIMIT_MB"
DEFAULT_LIMIT_MB = 16.0


def limit_bytes() -> int:
    """The per-stream limit in bytes (from EXECUTORCH_HIL_OUTPUT_LIMIT_MB, else 16 MiB)."""
    from harness.environ import env_positive

    mb = env_positive(LIMIT_ENV, "megabytes") or DEFAULT_LIMIT_MB
    return max(1024, int(mb * 1024 * 1024))


def omitted_line(total: int, kept: int) -> str:
    """The line that stands for the middle of a stream the limit cut."""
    return (f"\n[harness: output limit reached: {total} bytes were written, the middle "
            f"{total - kept} bytes are omitted here]\n")


def note(what: str, total: int, limit: int) -> str:
    """The verdict's words for a stream that met the limit."""
    return (f"output limit reached: the runner wrote {total} bytes to {what}; the first and "
            f"last {limit // 2} bytes are kept ({LIMIT_ENV} to change the limit of "
            f"{limit // (1024 * 1024) or limit} {'MiB' if limit >= 1024 * 1024 else 'bytes'})")


def notes_over(sizes: dict[str, int], limit: int) -> list[str]:
    """The verdict's notes for the streams (what -> bytes written) that met the limit."""
    return [note(what, size, limit) for what, size in sizes.items()
            if isinstance(size, int) and size > limit]


class CappedBuffer:
    """Bytes fed in order, of which the first `head` and the last `tail` are kept."""

    def __init__(self, limit: int | None = None, tail: int | None = None) -> None:
        limit = limit_bytes() if limit is None else limit
        self.head_cap = limit // 2
        self.tail_cap = limit - self.head_cap if tail is None else tail
        self._head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_size = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail.append(bytes(data))
        self._tail_size += len(data)
        while self._tail_size - len(self._tail[0]) >= self.tail_cap:
            self._tail_size -= len(self._tail.popleft())

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + min(self._tail_size, self.tail_cap)

    def data(self) -> bytes:
        tail = b"".join(self._tail)
        if self._tail_size > self.tail_cap:
            tail = tail[-self.tail_cap:]
        if self.total == len(self._head) + len(tail):
            return bytes(self._head) + tail
        kept = len(self._head) + len(tail)
        return bytes(self._head) + omitted_line(self.total, kept).encode() + tail

    def text(self) -> str:
        return self.data().decode("utf-8", errors="replace")


def trim(text: str, total: int, limit: int | None = None) -> str:
    """`text` (of a stream that carried `total` bytes) within the limit: its first and last
    halves around the line that says what was left out; `text` itself when it fits."""
    limit = limit_bytes() if limit is None else limit
    if len(text) <= limit:
        return text
    head, tail = text[:limit // 2], text[-(limit - limit // 2):]
    return head + omitted_line(total, limit) + tail


def read_capped(path: Path, limit: int | None = None) -> tuple[str, int]:
    """A file's text within the limit (head and tail, never the whole file in memory) and its
    size; ("", 0) when it cannot be read."""
    limit = limit_bytes() if limit is None else limit
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= limit:
                data = f.read()
            else:
                head = f.read(limit // 2)
                f.seek(size - (limit - limit // 2))
                data = head + omitted_line(size, limit).encode() + f.read()
    except OSError:
        return "", 0
    return data.decode("utf-8", errors="replace"), size
