"""Reads the interposer's QNN call trace and replays it into live handle state.

The trace is the ground truth for isolation and reference-count assertions: every backend,
device and context create/free and every graph execute, in call order, one line each:

    <seq> <kind> key=value ...      e.g.  "7 context_create rc=0 handle=0x1 backend=0x1 ..."

QNN reuses handle values after a free, so the replay gives each successful create a unique
identity (`context#3`) and maps raw values to the identity that is live at that moment.

Log handles (`log_create handle=.. level=N`, `log_free`) are followed too: backends and devices
name the log handle they were created with (`log=0x..`), and freeing a log handle while one of
them lives is a violation (the runtime then logs through a freed handle).

On phones the trace also carries DSP heap readings (`dsp_heap op=create|free context=...
event=DSP:... bytes=N`, written after the create or free they belong to), or one
`dsp_heap_unsupported rc=N` when the library refused DSP memory profiling.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.errors import HarnessError

KINDS = {"backend", "device", "context"}


class TraceFormatError(HarnessError):
    """A trace line that the interposer could not have written."""


@dataclasses.dataclass(frozen=True)
class TraceRecord:
    seq: int
    kind: str  # "api", "backend_create", "context_free", "graph_execute", ...
    fields: dict[str, str]
    offset: int  # byte offset just past this line

    @property
    def rc(self) -> int:
        return int(self.fields.get("rc", "0"))


def parse_trace(text: str) -> list[TraceRecord]:
    """Parse trace text; a torn last line (process killed mid-write) is ignored."""
    records: list[TraceRecord] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        offset += len(line.encode())
        if not line.endswith("\n"):
            break
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 2 or not parts[0].isdigit():
            raise TraceFormatError(f"bad QNN trace line {line.strip()!r}")
        fields: dict[str, str] = {}
        for token in parts[2:]:
            key, sep, value = token.partition("=")
            if not sep:
                raise TraceFormatError(f"bad field {token!r} in QNN trace line {line.strip()!r}")
            fields[key] = value
        records.append(TraceRecord(int(parts[0]), parts[1], fields, offset))
    return records


def read_trace(path: Path) -> list[TraceRecord]:
    return parse_trace(path.read_text()) if path.exists() else []


@dataclasses.dataclass(frozen=True)
class DspReading:
    """One DSP heap figure QNN reported, with the live contexts right after its create/free."""

    seq: int
    op: str  # "create" or "free"
    event: str  # e.g. "DSP:after_context_freed"
    bytes: int
    live_contexts: int
    offset: int  # trace byte offset just past the line (which step it belongs to)


@dataclasses.dataclass
class TraceState:
    """Live QNN objects after replaying a prefix of the trace, plus anything that went wrong."""

    live: dict[str, dict[str, str]] = dataclasses.field(
        default_factory=lambda: {k: {} for k in KINDS})  # kind -> raw handle -> identity
    created: dict[str, int] = dataclasses.field(default_factory=lambda: {k: 0 for k in KINDS})
    graphs: dict[str, str] = dataclasses.field(default_factory=dict)  # raw graph -> context id
    executes: dict[str, int] = dataclasses.field(default_factory=dict)  # context id -> count
    violations: list[str] = dataclasses.field(default_factory=list)
    api: dict[str, str] = dataclasses.field(default_factory=dict)
    dsp: list[DspReading] = dataclasses.field(default_factory=list)
    dsp_unsupported: int | None = None  # the library's error code when it refused
    # (kind, raw handle) of each backend and device -> the log handle it was created with
    logs: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        return {kind: len(handles) for kind, handles in sorted(self.live.items())}

    def live_contexts(self) -> set[str]:
        return set(self.live["context"].values())

    def apply(self, rec: TraceRecord) -> None:
        kind, _, action = rec.kind.partition("_")
        if rec.kind == "api":
            self.api = dict(rec.fields)
        elif rec.kind == "dsp_heap":
            try:
                value = int(rec.fields["bytes"])
            except (KeyError, ValueError):
                raise TraceFormatError(f"seq {rec.seq}: dsp_heap without a byte count") from None
            self.dsp.append(DspReading(rec.seq, rec.fields.get("op", ""),
                                       rec.fields.get("event", ""), value,
                                       len(self.live["context"]), rec.offset))
        elif rec.kind == "dsp_heap_unsupported":
            self.dsp_unsupported = rec.rc
        elif rec.kind == "log_free":
            freed = rec.fields.get("handle")
            holders = [self.live[k][h] for (k, h), log in self.logs.items()
                       if log == freed and h in self.live[k]]
            if holders:
                self.violations.append(
                    f"seq {rec.seq}: log_free of log handle {freed} while "
                    f"{', '.join(holders)} created with it live")
        elif kind in KINDS and action == "create":
            if rec.rc == 0:
                self.created[kind] += 1
                self.live[kind][rec.fields["handle"]] = f"{kind}#{self.created[kind]}"
                if "log" in rec.fields:
                    self.logs[(kind, rec.fields["handle"])] = rec.fields["log"]
        elif kind in KINDS and action == "free":
            if rec.rc != 0:
                return  # a failed free frees nothing (an injected one never reached QNN)
            handle = rec.fields.get("handle", "")
            identity = self.live[kind].pop(handle, None)
            if identity is None:
                self.violations.append(f"seq {rec.seq}: {kind}_free of unknown handle {handle}")
            elif kind == "context":
                self.graphs = {g: c for g, c in self.graphs.items() if c != identity}
        elif rec.kind in ("graph_create", "graph_retrieve") and rec.rc == 0:
            context = self.live["context"].get(rec.fields.get("context", ""))
            if context is None:
                self.violations.append(
                    f"seq {rec.seq}: {rec.kind} on freed or unknown context {rec.fields.get('context')}")
            else:
                self.graphs[rec.fields["handle"]] = context
        elif rec.kind == "graph_execute":
            context = self.graphs.get(rec.fields.get("graph", ""))
            if context is None:
                self.violations.append(
                    f"seq {rec.seq}: graph_execute on graph {rec.fields.get('graph')} whose "
                    "context is freed or unknown")
            else:
                self.executes[context] = self.executes.get(context, 0) + 1

    def snapshot(self) -> dict:
        return {
            "live": self.counts(),
            "contexts": sorted(self.live_contexts()),
            "executes": dict(self.executes),
            "violations": list(self.violations),
            "dsp_heap": self.dsp[-1].bytes if self.dsp else None,  # bytes, the latest reading
        }


def replay_by_offsets(records: list[TraceRecord], offsets: list[int]) -> list[dict]:
    """State snapshot at each byte offset (one per runner step), in order."""
    state = TraceState()
    out: list[dict] = []
    i = 0
    for offset in offsets:
        while i < len(records) and records[i].offset <= offset:
            state.apply(records[i])
            i += 1
        out.append(state.snapshot())
    return out


def replay(records: list[TraceRecord]) -> TraceState:
    state = TraceState()
    for rec in records:
        state.apply(rec)
    return state
