"""One log: everything the harness says goes through `logging`, under the `harness` logger.

Module loggers (`logging.getLogger(__name__)`) carry what happens; a *notice* is a line the
session also shows in its header and summary (a runner fallback, a damaged cache entry, a lease
taken over). `notice(logger, text, session)` logs it at WARNING with the session as a tag, and
the session's `NoticeCollector`, attached to the `harness` logger, gathers the ones of its own
session. So `--log-cli-level`, `caplog` and pytest's captured-log sections see every notice,
and the header is built from the same records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

ROOT = "harness"
# The record attribute naming the session a notice belongs to.
NOTICE_ATTR = "hil_notice"


def notice(logger: logging.Logger | logging.LoggerAdapter, text: str,
           session: object = None) -> None:
    """Log `text` as a notice of `session` (WARNING, so it is shown and captured by default)."""
    logger.warning(text, extra={NOTICE_ATTR: session if session is not None else True})


def notifier(logger: logging.Logger, session: object) -> Callable[[str], None]:
    """A `notice=` callback for the parts that take one (devices, the farm, the compiler)."""
    return lambda text: notice(logger, text, session)


class NoticeCollector(logging.Handler):
    """Gathers the notices of one session (in order, each once) from the `harness` logger."""

    def __init__(self, session: object) -> None:
        super().__init__(level=logging.WARNING)
        self.session = session
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, NOTICE_ATTR, None) is self.session:
            text = record.getMessage()
            if text not in self.lines:
                self.lines.append(text)

    def attach(self) -> NoticeCollector:
        logging.getLogger(ROOT).addHandler(self)
        return self

    def detach(self) -> None:
        logging.getLogger(ROOT).removeHandler(self)
