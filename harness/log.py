"""One log: everything the harness says goes through `logging`, under the `harness` logger.

Module loggers (`logging.getLogger(__name__)`) carry what happens; a *notice* is a line the
session also shows in its header and summary (a runner fallback, a damaged cache entry, a lease
taken over). `notice(logger, text, session)` logs it at WARNING with the session as a tag, and
the session's `NoticeCollector`, attached to the `harness` logger, gathers the ones of its own
session. So `--log-cli-level`, `caplog` and pytest's captured-log sections see every notice,
and the header is built from the same records.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = "harness"
# The record attribute naming the session a notice belongs to.
NOTICE_ATTR = "hil_notice"
# The record attribute saying which notices are one (default: the same text): a full disk is
# said once per filesystem, whichever directory and process met it first.
NOTICE_KEY_ATTR = "hil_notice_key"


def notice(logger: logging.Logger | logging.LoggerAdapter, text: str,
           session: object = None, key: str | None = None) -> None:
    """Log `text` as a notice of `session` (WARNING, so it is shown and captured by default);
    `key` makes notices of other texts one (only the first is kept)."""
    logger.warning(text, extra={NOTICE_ATTR: session if session is not None else True,
                                NOTICE_KEY_ATTR: key})


def notifier(logger: logging.Logger, session: object) -> Callable[[str], None]:
    """A `notice=` callback for the parts that take one (devices, the farm, the compiler)."""
    return lambda text: notice(logger, text, session)


class NoticeCollector(logging.Handler):
    """Gathers the notices of one session (in order, each once) from the `harness` logger."""

    def __init__(self, session: object) -> None:
        super().__init__(level=logging.WARNING)
        self.session = session
        self.keyed: dict[str, str] = {}  # key -> text, in order

    @property
    def lines(self) -> list[str]:
        return list(self.keyed.values())

    def emit(self, record: logging.LogRecord) -> None:
        tag = getattr(record, NOTICE_ATTR, None)
        if tag is self.session or tag is True:  # True: a notice of no one session (disk_full)
            self.add(record.getMessage(), getattr(record, NOTICE_KEY_ATTR, None))

    def add(self, text: str, key: str | None = None) -> None:
        """Keep `text` (said elsewhere: an xdist worker's notice) unless one of its key is kept."""
        self.keyed.setdefault(key or text, text)

    def attach(self) -> NoticeCollector:
        logging.getLogger(ROOT).addHandler(self)
        return self

    def detach(self) -> None:
        logging.getLogger(ROOT).removeHandler(self)


FULL = (errno.ENOSPC, errno.EDQUOT)
_FULL_SAID: set[str] = set()  # st_dev of the filesystems found full
_FULL_LOCK = threading.Lock()


@contextlib.contextmanager
def disk_full_tolerated(directory: Path, what: str) -> Iterator[None]:
    """Writes of `what` into `directory` that a full disk (ENOSPC, or a quota) must not turn
    into a verdict: the error becomes one notice naming the directory (once per directory and
    process), and the caller goes on without the file. A full --artifacts-dir turned 6 of 8
    known-issue xfails into FAILED with a bare "[Errno 28] No space left on device" from
    writing result.json, and ended the session in a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in FULL:
            raise
        where = str(directory)
        try:  # one notice per full filesystem, naming the first directory that met it
            disk = str(Path(directory).stat().st_dev)
        except OSError:
            disk = where
        with _FULL_LOCK:
            first = disk not in _FULL_SAID
            _FULL_SAID.add(disk)
        if first:
            notice(logging.getLogger(f"{ROOT}.disk"),
                   f"{where}: {exc.strerror} (writing {what}); the files written there from "
                   "now on may be missing, the verdicts are kept. Free space there or give "
                   "--artifacts-dir (or --hil-report) on another disk", True,
                   key=f"disk-full:{disk}")


ABANDON_AFTER = 3  # interrupts during a cleanup that abandon it (the first two are deferred)


@contextlib.contextmanager
def interrupts_deferred(what: str) -> Iterator[None]:
    """Run a cleanup (`what`: "removing the workspace and releasing the lease") to its end
    through Ctrl-C and SIGTERM: the session is already ending, and a second Ctrl-C that landed
    in the workspace removal left the session's run directories on the device. An interrupt
    is said once and ignored; the ABANDON_AFTER-th abandons the cleanup (a device that no
    longer answers should not hold the terminal for its timeouts). Main thread only (signals
    are delivered there); elsewhere the block runs as it is."""
    import signal
    import sys

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    count = 0

    def deferred(signum: int, frame: object) -> None:
        nonlocal count
        count += 1
        if count >= ABANDON_AFTER:
            raise KeyboardInterrupt(f"cleanup abandoned ({what})")
        if count == 1:
            sys.stderr.write(f"\ninterrupted during the cleanup: finishing it first ({what}); "
                             f"interrupt {ABANDON_AFTER - count} more times to abandon it\n")
            sys.stderr.flush()

    previous = {sig: signal.signal(sig, deferred) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
