"""What a runner process left behind, whatever the device ran it: `RunOutput`. Every device
returns one; `harness.results.run.ScenarioResult` reads it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class RunOutput:
    """Raw outcome of running a runner process, whatever the device."""

    returncode: int | None  # None when killed for a timeout
    stdout: str
    stderr: str
    trace_text: str = ""
    timed_out: bool = False
    runner: str = ""
    logs: dict[str, str] = dataclasses.field(default_factory=dict)  # logcat, tombstone, ...
    pushes: dict[str, int] = dataclasses.field(default_factory=dict)  # pushed/skipped counts
    # What the device saw about a failed run beyond its output (a full disk, an output limit):
    # part of the run's headline.
    notes: list[str] = dataclasses.field(default_factory=list)
    # The runner ran under valgrind (--valgrind): its XML report (harness.results.valgrind).
    valgrind_xml: str = ""
