"""The events a runner writes, typed: `StartEvent`, `StepEvent` (with `Substep`, `Output`,
`OptionReport`, `Memory`), `EndEvent`. `parse_event` checks one against its type and names the
bad field (`EventError`); `parse_events` reads every event of a runner's stdout.

These types are the events' schema: the harness keeps each event as its JSON object
(`harness.results.run.StepResult.event`) and checks it against them once
(`ScenarioResult.build`); the conformance test reads them typed.

Cheap to import: the standard library and `harness.errors` only.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, Literal, Union

from harness.errors import HarnessError
from harness.protocol.scenario_file import OPS, VALUE_KINDS
from harness.protocol.wire import EVENT_PREFIX, is_int, is_number, json_kind, read_events

Status = Literal["ok", "error", "mismatch"]
"""A step's status: `ok`; `error` (`error_code` is the runtime's Error value, or
`HARNESS_ERROR_CODE` for an error the runner found itself); `mismatch` (it ran, and its outputs
differ from `expected` beyond tolerance; `error_code` 0)."""

HARNESS_ERROR_CODE = -1
"""The `error_code` of a step error the runner found itself (a module that is not loaded, an
operation it cannot do), not one the runtime returned; never 0."""


OutputValue = bool | int | float | str | list[bool | int | float | None] | None


@dataclasses.dataclass(frozen=True)
class Output:
    """One output of an `execute` step: a tensor (`dtype` a tensor dtype), or a non-tensor
    value (`dtype` one of VALUE_KINDS: int, float, bool, string, none; shape [] for one value,
    [n] for a list) whose `value` is given too (a float that is not finite as null).
    `sha256` covers the bytes (a value's: harness.protocol.values.value_bytes); `data` (base64
    of those bytes) only when the step asked for `emit_outputs`."""

    dtype: str
    shape: list[int]
    sha256: str
    data: str | None = None
    value: OutputValue = None


@dataclasses.dataclass(frozen=True)
class OptionReport:
    """What `set_option` / `get_option` did."""

    backend: str
    key: str
    value: bool | int | str | None
    supported: bool


@dataclasses.dataclass(frozen=True)
class DmaBuf:
    count: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class Heap:
    """malloc's own count, bytes: `in_use` (allocated from its arenas), `mmapped` (allocated
    as chunks of their own, above the mmap threshold) and `arena` (what the arenas hold from
    the kernel); from mallinfo2 (glibc) or mallinfo (bionic)."""

    in_use: int
    mmapped: int
    arena: int


@dataclasses.dataclass(frozen=True)
class Memory:
    """kB as the kernel prints them (`rollup`: smaps_rollup; `mappings`: watched paths summed
    over smaps); `dmabuf` sizes in bytes; `heap` where the C library reports it."""

    rollup: dict[str, int]
    mappings: dict[str, dict[str, int]]
    dmabuf: DmaBuf
    heap: Heap | None = None


@dataclasses.dataclass(frozen=True)
class Substep:
    """One sub-step's result inside a `parallel` step's event."""

    op: str
    module: str | None
    method: str | None
    status: Status
    error_code: int
    message: str
    outputs: list[Output]
    max_abs_diff: float | None
    elapsed_ms: float
    token: int | None = None  # an execute with `decode`: the token it fed


@dataclasses.dataclass(frozen=True)
class StartEvent:
    event: Literal["start"]
    runner: str
    pid: int
    scenario: str


@dataclasses.dataclass(frozen=True)
class StepEvent:
    """One step's event; `substeps` only (and always) for `parallel`."""

    event: Literal["step"]
    index: int
    op: str
    module: str | None
    method: str | None
    status: Status
    error_code: int
    message: str
    elapsed_ms: float
    outputs: list[Output]
    max_abs_diff: float | None
    option: OptionReport | None
    trace_offset: int
    memory: Memory
    substeps: list[Substep] | None = None
    token: int | None = None  # an execute with `decode`: the token it fed (the argmax)


@dataclasses.dataclass(frozen=True)
class EndEvent:
    event: Literal["end"]
    status: Literal["ok", "failed"]
    steps: int
    failed_steps: int


Event = StartEvent | StepEvent | EndEvent
EVENT_TYPES: dict[str, type] = {"start": StartEvent, "step": StepEvent, "end": EndEvent}


class EventError(HarnessError):
    """An event that does not match the protocol; the message names the field (`path`)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def parse_event(raw: dict[str, Any] | str) -> Event:
    """A typed event from its JSON object (or its line, with or without EVENT_PREFIX).
    Strict: every field of the event's type, of its type (an int is a float), and no other."""
    if isinstance(raw, str):
        text = raw[len(EVENT_PREFIX):] if raw.startswith(EVENT_PREFIX) else raw
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EventError(f"event is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise EventError(f"an event is an object, got {json_kind(raw)}")
    kind = raw.get("event")
    if kind not in EVENT_TYPES:
        raise EventError(f"field 'event' must be one of {', '.join(EVENT_TYPES)}, got {kind!r}")
    event: Event = _convert(raw, EVENT_TYPES[kind], "", f"{kind} event")
    if isinstance(event, StepEvent):
        if event.index < 0:
            raise EventError(f"step event: field 'index' must be >= 0, got {event.index}")
        if event.op not in OPS:
            raise EventError(f"step event: field 'op' must be one of {', '.join(OPS)}, "
                             f"got {event.op!r}")
        for i, out in enumerate([*event.outputs, *(o for s in event.substeps or ()
                                                    for o in s.outputs)]):
            _check_value(out, f"outputs[{i}]")
        if (event.substeps is not None) != (event.op == "parallel"):
            raise EventError("step event: field 'substeps' must be given for a parallel step "
                             f"and only for it (op {event.op!r})")
    return event


def _check_value(out: Output, path: str) -> None:
    """A value output's `value` is of its kind and shape; a tensor has none."""
    from harness.protocol.values import kind_of

    if out.dtype not in VALUE_KINDS:
        if out.value is not None:
            raise EventError(f"step event: field '{path}.value' is only for a non-tensor output "
                             f"(dtype {out.dtype!r} is a tensor's)", f"{path}.value")
        return
    items = out.value if isinstance(out.value, list) else [out.value]
    listed = isinstance(out.value, list)
    fits = all((v is None or is_number(v)) if out.dtype == "float" else kind_of(v) == out.dtype
               for v in items)
    if not fits or listed != bool(out.shape) or (listed and [len(items)] != out.shape):
        raise EventError(f"step event: field '{path}.value' must be a {out.dtype} of shape "
                         f"{out.shape}, got {json_kind(out.value)} {out.value!r}", f"{path}.value")


def parse_events(stdout: str) -> list[Event]:
    """Every event of a runner's stdout, typed (EventError on the first bad one)."""
    return [parse_event(e) for e in read_events(stdout)]


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin is list:
        return "an array"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "an object"
    return {type(None): "null", bool: "a bool", int: "an integer", float: "a number",
            str: "a string"}.get(tp, str(tp))


def _convert(value: Any, tp: Any, path: str, what: str) -> Any:
    """`value` checked against the annotation `tp`; EventError names `path` when it is not."""

    def fail() -> typing.NoReturn:
        raise EventError(f"{what}: field '{path}' must be {_describe(tp)}, got "
                         f"{json_kind(value)} {value!r}", path)

    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is not None and type(None) in options and len(options) == 2:
            # `X | None` given a value: X's own error when it names a field inside X.
            try:
                return _convert(value, next(o for o in options if o is not type(None)), path,
                                what)
            except EventError as exc:
                if exc.path != path:
                    raise
                fail()
        for option in options:
            try:
                return _convert(value, option, path, what)
            except EventError:
                continue
        fail()
    if origin is Literal:
        if value in typing.get_args(tp) and isinstance(value, str):
            return value
        fail()
    if tp is type(None):
        if value is None:
            return None
        fail()
    if tp is bool:
        if isinstance(value, bool):
            return value
        fail()
    if tp is int:
        if is_int(value):
            return value
        fail()
    if tp is float:
        if is_number(value):
            return float(value)
        fail()
    if tp is str:
        if isinstance(value, str):
            return value
        fail()
    if origin is list:
        if not isinstance(value, list):
            fail()
        (item,) = typing.get_args(tp)
        return [_convert(v, item, f"{path}[{i}]", what) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            fail()
        _, item = typing.get_args(tp)
        return {k: _convert(v, item, f"{path}.{k}" if path else k, what)
                for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            fail()
        hints = _hints(tp)
        unknown = [k for k in value if k not in hints]
        if unknown:
            where = f"{path}.{unknown[0]}" if path else unknown[0]
            raise EventError(f"{what}: unknown field '{where}'", where)
        kwargs = {}
        for f in dataclasses.fields(tp):
            sub = f"{path}.{f.name}" if path else f.name
            if f.name not in value:
                if f.default is dataclasses.MISSING:
                    raise EventError(f"{what}: missing field '{sub}'", sub)
                continue
            kwargs[f.name] = _convert(value[f.name], hints[f.name], sub, what)
        return tp(**kwargs)
    raise TypeError(f"no protocol conversion for {tp!r}")  # a bug in the event types
