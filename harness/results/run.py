"""What one scenario run produced: the runner's events, joined with the QNN trace replay.

`ScenarioResult` is what tests and assertions look at; it never needs to know which device or
runner produced it.
"""

from __future__ import annotations

import dataclasses
import functools
import signal as signal_module
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from harness.protocol.output import RunOutput
from harness.results.crash_site import crash_site_line, without_crash_report
from harness.protocol.wire import (STEP_MARKER, ExitCode, is_protocol_line, read_events, run_ended,
                                   step_marker_index)
from harness.protocol.events import EventError, parse_event
from harness.qnn.trace import TraceRecord, TraceState, replay, replay_by_offsets
from harness.results.valgrind import Finding
from harness.results.valgrind import parse as parse_valgrind
from harness.scenario import Scenario, Step


def split_log_by_step(text: str) -> dict[int, str]:
    """The runner's stderr cut at its step markers (runner-protocol.md): step index -> the
    lines written while that step ran; -1 holds start-up and teardown lines."""
    segments: dict[int, list[str]] = {-1: []}
    current = -1
    for line in text.splitlines():
        if line.startswith(STEP_MARKER):
            index = step_marker_index(line)
            current = current if index is None else index
            segments.setdefault(current, [])
            continue
        segments.setdefault(current, []).append(line)
    return {k: "\n".join(v) for k, v in segments.items()}


FailureKind = Literal["timeout", "crash", "incomplete", "refused"]


@dataclasses.dataclass(frozen=True, eq=False)
class LiveCounts(Mapping[str, int]):
    """How many QNN backends, contexts and devices are live (created and not freed), from the
    trace. A mapping too (`live["context"]`, `== {"backend": 0, ...}`), as results.json writes it."""

    backend: int = 0
    context: int = 0
    device: int = 0

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> LiveCounts:
        return cls(**{k: int(counts.get(k, 0)) for k in ("backend", "context", "device")})

    @property
    def released(self) -> bool:
        """Nothing of QNN is live."""
        return not (self.backend or self.context or self.device)

    def __getitem__(self, key: str) -> int:
        if key not in ("backend", "context", "device"):
            raise KeyError(key)
        return int(getattr(self, key))

    def __iter__(self) -> Iterator[str]:
        return iter(("backend", "context", "device"))

    def __len__(self) -> int:
        return 3

    def __repr__(self) -> str:
        return f"LiveCounts(backend={self.backend}, context={self.context}, device={self.device})"


NONE_LIVE = LiveCounts()


@dataclasses.dataclass
class StepResult:
    step: Step
    # The runner's step event as its JSON object (its schema: harness.protocol.events.StepEvent,
    # checked once by ScenarioResult.build); None when the runner never reported this step.
    event: dict[str, Any] | None
    trace: dict[str, Any]  # TraceState.snapshot() after the step
    log: str = ""  # the runtime's stderr lines written while this step ran

    @property
    def status(self) -> str:
        return self.event["status"] if self.event else "not-run"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def live(self) -> LiveCounts:
        return LiveCounts.of(self.trace["live"])

    @property
    def contexts(self) -> list[str]:
        """The live QNN contexts after the step (their trace identities)."""
        return list(self.trace["contexts"])

    @property
    def executes(self) -> dict[str, int]:
        """Graph executes per context so far (trace identity -> count)."""
        return dict(self.trace["executes"])

    @property
    def memory(self) -> dict[str, Any]:
        memory: dict[str, Any] = (self.event or {}).get("memory") or {}
        return memory

    def describe(self) -> str:
        e = self.event or {}
        msg = f" [{e.get('error_code')}] {e.get('message')}" if e.get("message") else ""
        return f"{self.step.describe()}: {self.status}{msg}"


@dataclasses.dataclass
class ScenarioResult:
    scenario: Scenario
    output: RunOutput
    steps: list[StepResult]
    trace: list[TraceRecord]
    artifacts: Path | None = None
    # The checks (harness.results.assertions) a test made of this run, in order: the run's record
    # keeps them, so `python -m harness replay` judges a replay by the same ones.
    checks: list[str] = dataclasses.field(default_factory=list)
    # A soak run's growth per cycle (harness.results.soak.SoakFit.entry), once a test fitted it:
    # results.json and the JUnit properties report it.
    soak: dict[str, Any] | None = None
    # Every event of the run is checked once against the protocol's types (harness.protocol.
    # events); one that does not match is named here (a failure of the run: the runner broke it).
    protocol_errors: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def build(cls, scenario: Scenario, output: RunOutput, trace: list[TraceRecord],
              artifacts: Path | None = None) -> ScenarioResult:
        every = read_events(output.stdout)
        errors: list[str] = []
        for raw in every:
            try:
                parse_event(raw)
            except EventError as exc:
                errors.append(f"{exc} in {raw!r:.300}")
        events = [e for e in every if e.get("event") == "step"]
        by_index = {e["index"]: e for e in events}
        offsets = [by_index[i]["trace_offset"] if i in by_index else -1
                   for i in range(len(scenario.steps))]
        # Steps the runner never reached see the whole trace (what happened until it died).
        end = trace[-1].offset if trace else 0
        states = replay_by_offsets(trace, [o if o >= 0 else end for o in offsets])
        logs = split_log_by_step(output.stderr)
        steps = [StepResult(s, by_index.get(i), states[i], logs.get(i, ""))
                 for i, s in enumerate(scenario.steps)]
        result = cls(scenario, output, steps, trace, artifacts, protocol_errors=errors)
        result.__dict__["completed"] = run_ended(every)  # the cached property, from this parse
        return result

    def step(self, label: str) -> StepResult:
        """The step the scenario labelled `label` (`Scenario.label`)."""
        try:
            return self.steps[self.scenario.labels[label]]
        except KeyError:
            known = ", ".join(sorted(self.scenario.labels)) or "none"
            raise KeyError(f"scenario {self.scenario.name} has no step labelled {label!r} "
                           f"(labels: {known})") from None

    @property
    def last(self) -> StepResult:
        """The scenario's last step (after teardown steps, where counts must be zero)."""
        return self.steps[-1]

    @functools.cached_property
    def completed(self) -> bool:
        """The runner wrote its `end` event: it ran every step and its teardown. A run without
        it did not finish, whatever its exit code says. (Read once: the output never changes.)"""
        return run_ended(self.output.stdout)

    @property
    def crashed(self) -> bool:
        """Killed, hung, died by a signal, or exited without its `end` event."""
        code = ExitCode.of(self.output.returncode)
        if self.output.timed_out or code is None:
            return True
        return code != ExitCode.BAD_SCENARIO and not self.completed

    @property
    def failure_kind(self) -> FailureKind | None:
        """How the run as a whole failed: "timeout", "crash" (a signal), "incomplete" (exited
        without `end`), "refused" (exit 2), or None when it finished."""
        out = self.output
        if out.timed_out:
            return "timeout"
        code = ExitCode.of(out.returncode)
        if code is None:
            return "crash"
        if code == ExitCode.BAD_SCENARIO:
            return "refused"
        return None if self.completed else "incomplete"

    @property
    def refused(self) -> bool:
        """The runner would not run the scenario (exit 2: invalid scenario, missing file)."""
        return ExitCode.of(self.output.returncode) == ExitCode.BAD_SCENARIO

    @property
    def last_completed(self) -> StepResult | None:
        done = [s for s in self.steps if s.event is not None]
        return done[-1] if done else None

    def crash_report(self) -> str:
        """Signal, last completed step and the log tail: what a user needs to start on a crash."""
        out = self.output
        head = self.crash_headline()
        last = self.last_completed
        lines = [head]
        if out.returncode is not None and out.returncode < 0:
            lines.append(crash_site_line(out.stderr))
        lines.append(f"last completed step: {last.step.describe() if last else '(none)'}")
        nxt = next((s for s in self.steps if s.event is None), None)
        if nxt is not None:
            lines.append(f"step in progress: {nxt.step.describe()}")
        lines.append("log tail:\n" + log_tail(without_crash_report(out.stderr) + out.stdout, 20))
        for name, text in out.logs.items():
            lines.append(f"{name} tail:\n" + log_tail(text, 20))
        if self.artifacts:
            lines.append(f"artifacts: {self.artifacts}")
        return "\n".join(lines)

    def crash_headline(self) -> str:
        head = self._headline()
        return "; ".join([head, *self.output.notes])

    def _headline(self) -> str:
        out = self.output
        if out.timed_out:
            return "runner hung: killed after timeout"
        if out.returncode is not None and out.returncode < 0:
            return f"runner crashed with signal {_signal_name(-out.returncode)}"
        if self.refused:
            return "runner refused the scenario (exit 2: invalid scenario or missing file)"
        if self.failure_kind == "incomplete":
            return (f"runner exited with code {out.returncode} without its end event: the run "
                    "did not finish")
        return f"runner exited with code {out.returncode}"

    @functools.cached_property
    def memory_findings(self) -> list[Finding]:
        """What valgrind reported of the run (--valgrind; none without it), in its order."""
        return parse_valgrind(self.output.valgrind_xml)

    @functools.cached_property
    def trace_state(self) -> TraceState:
        """The whole trace replayed (live objects, violations, DSP heap readings), once."""
        return replay(self.trace)

    def final_trace(self) -> dict[str, Any]:
        return self.trace_state.snapshot()

    def trace_during(self, index: int) -> list[TraceRecord]:
        """QNN trace records written while step `index` ran: past the trace offset the step
        before it reported, up to its own; none for a step that reported no event."""
        end = (self.steps[index].event or {}).get("trace_offset")
        if end is None:
            return []
        start = next((s.event["trace_offset"] for s in reversed(self.steps[:index])
                      if s.event and "trace_offset" in s.event), 0)
        return [r for r in self.trace if start < r.offset <= end]

    def step_at_offset(self, offset: int) -> int | None:
        """The step during which the trace reached byte `offset`: the first step whose
        reported trace offset covers it; None past the last reported step (the runner died)."""
        for i, s in enumerate(self.steps):
            reached = (s.event or {}).get("trace_offset")
            if reached is not None and reached >= offset:
                return i
        return None

    def summary(self) -> str:
        return "\n".join(f"  {i}: {s.describe()} live={s.live}" for i, s in enumerate(self.steps))


def _signal_name(num: int) -> str:
    try:
        return signal_module.Signals(num).name
    except ValueError:
        return str(num)


def log_tail(text: str, lines: int) -> str:
    kept = [l for l in text.splitlines() if not is_protocol_line(l)]
    return "\n".join("    " + l for l in kept[-lines:])

