"""The wire between a runner and the harness: `EVENT_PREFIX` before every event line on stdout,
`STEP_MARKER` lines on stderr, JSON as the protocol reads it (`parse_json`, and the JSON type
names its messages use), and `ExitCode`: what a runner's exit status means.

Cheap to import: the standard library only (runners start as fresh processes, one per scenario).
"""

from __future__ import annotations

import enum
import json
from typing import Any

# ---------------------------------------------------------------------------------- the wire

EVENT_PREFIX = "HARNESS_EVENT "
"""Starts every event line on stdout, so runtime log lines there are never read as events."""

STEP_MARKER = "HARNESS_STEP "
"""Starts a stderr line `HARNESS_STEP <index>` written before each step runs (`-1` before the
teardown), so the runtime's own log lines can be told apart by step."""

TEARDOWN_INDEX = -1
"""The step marker index written after the last step, before the runner tears down."""


def format_event(event: dict[str, Any]) -> str:
    """One event line as it goes to stdout (without the newline)."""
    return EVENT_PREFIX + json.dumps(event)


def format_step_marker(index: int) -> str:
    """One step marker line as it goes to stderr (without the newline)."""
    return f"{STEP_MARKER}{index}"


def read_events(stdout: str) -> list[dict[str, Any]]:
    """The JSON object of every event line in a runner's stdout, in order. Lines that are not
    events are skipped, and so is an event line torn by a crash."""
    events: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        if line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                events.append(event)
    return events


def run_ended(events: list[dict[str, Any]] | str) -> bool:
    """Whether a run wrote its `end` event (it ran every step and its teardown): from its
    events, or from its stdout. A run without it did not finish, whatever its exit code."""
    if isinstance(events, str):
        events = read_events(events)
    return any(e.get("event") == "end" for e in events)


def step_marker_index(line: str) -> int | None:
    """The step index of a step marker line; None when the line is not a marker. A marker
    whose index cannot be read gives None too."""
    if not line.startswith(STEP_MARKER):
        return None
    try:
        return int(line[len(STEP_MARKER):].split()[0])
    except (IndexError, ValueError):
        return None


def is_protocol_line(line: str) -> bool:
    """An event or step marker line (not the runtime's own output)."""
    return line.startswith(EVENT_PREFIX) or line.startswith(STEP_MARKER)


# -------------------------------------------------------------------------------- exit codes

class ExitCode(enum.IntEnum):
    """A runner's exit status. Anything else (a signal, another code) is a crash."""

    def __new__(cls, value: int, doc: str) -> ExitCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.__doc__ = doc
        return member

    OK = 0, "Every step was `ok`; the run ended with its `end` event."
    STEP_FAILED = 1, ("The scenario ran to its `end` event and at least one step was `error` or "
                      "`mismatch`. A step error does not stop the run.")
    BAD_SCENARIO = 2, ("The scenario could not be run: bad invocation, unreadable file, "
                       "invalid JSON or scenario (see `validate_scenario`), or a `.pte` or "
                       "tensor file that is missing or whose size does not match its shape. "
                       "Checked before the first step: no event is written.")

    @classmethod
    def of(cls, returncode: int | None) -> ExitCode | None:
        """The protocol's meaning of a process's return code; None for a crash (killed by a
        signal, timed out (None), or any code that is not one of these)."""
        return next((code for code in cls if code.value == returncode), None)


# ------------------------------------------------------------------------------ JSON values

def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> Any:
    """JSON as the protocol reads it: strict (no NaN or Infinity)."""
    return json.loads(text, parse_constant=_no_constant)


def is_int(v: Any) -> bool:
    """A JSON integer (a bool is not one, though Python's bool is an int)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A JSON number, integer or not (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# JSON type names for messages, bool before int (a bool is an int in Python).
_JSON_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "bool"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
    (dict, "object"))


def json_kind(v: Any) -> str:
    """A JSON type name for messages."""
    if v is None:
        return "null"
    return next((name for cls, name in _JSON_KINDS if isinstance(v, cls)), type(v).__name__)
