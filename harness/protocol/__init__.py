"""The runner protocol: what a runner reads, writes and exits with. The one definition that the
Python runner (`harness/runner/python_runner.py`), the harness (`harness/results/run.py`,
`harness/scenario/__init__.py`) and the conformance test of both runners share; the native runner
(`harness/runner/native/`) implements the same rules in C++, and
tests/framework/test_protocol_conformance.py holds the two to them.
docs/runner-protocol.md explains it in prose.

- the wire: `EVENT_PREFIX` before every event line on stdout, `STEP_MARKER` lines on stderr;
- `ExitCode`: what a runner's exit status means;
- the scenario file: `SCENARIO_VERSION`, the ops (`OP_FIELDS`, `PARALLEL_OPS`,
  `MAX_PARALLEL`), tensor dtypes (`DTYPES`), backend option limits, and
  `validate_scenario` / `load_scenario`, which reject what cannot be run (exit 2) with a
  message naming the step and field;
- typed events: `StartEvent`, `StepEvent` (with `Substep`, `Output`, `OptionReport`,
  `Memory`), `EndEvent`; `parse_event` checks one and names the bad field.

Cheap to import: the standard library and `harness.errors` only (runners start as fresh
processes, one per scenario).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from harness.errors import HarnessError

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


# ------------------------------------------------------------------------- the scenario file

SCENARIO_VERSION = 1
"""The scenario format a runner reads; a file may omit `version`, but not give another."""


@dataclasses.dataclass(frozen=True)
class OpFields:
    """The fields of one op besides `op`: those it must have and those it may have. A field
    given as null counts as absent."""

    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


OP_FIELDS: dict[str, OpFields] = {
    "load_module": OpFields(("module", "pte"), ("backend_options", "load_mode")),
    "load_method": OpFields(("module", "method")),
    "execute": OpFields(("module", "method"), ("inputs", "expected", "atol", "rtol",
                                               "emit_outputs", "feed", "shared_inputs")),
    "unload_method": OpFields(("module", "method")),
    "destroy_module": OpFields(("module",)),
    "snapshot": OpFields(()),
    "set_option": OpFields(("backend", "key", "value")),
    "get_option": OpFields(("backend", "key"), ("type",)),
    "parallel": OpFields(("steps",)),
}
OPS = tuple(OP_FIELDS)
PARALLEL_OPS = ("load_module", "load_method", "execute", "unload_method", "destroy_module")
"""Ops a `parallel` step may run, one thread each, every one on a different module."""
MAX_PARALLEL = 16
"""At most this many sub-steps (threads) in one `parallel` step."""

DTYPES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
                          "int64": 8, "int32": 4, "int16": 2, "int8": 1,
                          "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1}
"""Tensor file dtypes and their item sizes; files are raw little-endian, C-contiguous. Every
ScalarType a method's inputs and outputs hold as plain numbers (not complex, quantized, bits or
float8), named as numpy (and ml_dtypes for bfloat16) and torch name them."""
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
"""Compared within tolerance; every other dtype (integers, bool) compares exactly."""
MAX_SHAPE_ENTRY = 2**31 - 1

# Limits of executorch::runtime::BackendOption and LoadBackendOptionsMap (bytes, UTF-8).
MAX_BACKEND_NAME_BYTES = 63
MAX_OPTION_KEY_BYTES = 63
MAX_OPTION_STRING_BYTES = 255
MAX_BACKENDS = 8
OPTION_INT_RANGE = (-2**31, 2**31 - 1)
GET_OPTION_TYPES = ("int", "bool", "string", "str")
LOAD_MODES = ("File", "Mmap", "MmapUseMlock", "MmapUseMlockIgnoreErrors")
"""executorch::extension::Module::LoadMode, by its enumerator names: how `load_module` reads
the program (FileDataLoader, or MmapDataLoader with its three mlock configs)."""
DEFAULT_LOAD_MODE = "MmapUseMlockIgnoreErrors"
"""What a `load_module` without `load_mode` uses: the Module default and the pybindings'
only loader for a file."""


class ScenarioError(HarnessError):
    """A scenario that cannot be run as written."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A tensor file of an `execute` step; `file` as written (absolute, or relative to the
    scenario file's directory)."""

    dtype: str
    shape: tuple[int, ...]
    file: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPES[self.dtype]


OptionValue = bool | int | str


@dataclasses.dataclass(frozen=True)
class ScenarioStep:
    """One validated step. Only the fields of its op are set (a `snapshot` step has no module
    even if the file gives one); `extra` keeps fields the protocol does not know, as written."""

    op: str
    module: str | None = None
    method: str | None = None
    pte: str | None = None
    backend_options: dict[str, dict[str, OptionValue]] = dataclasses.field(default_factory=dict)
    load_mode: str = DEFAULT_LOAD_MODE  # load_module: one of LOAD_MODES
    inputs: tuple[TensorSpec, ...] = ()
    expected: tuple[TensorSpec, ...] = ()
    atol: float = 0.0
    rtol: float = 0.0
    emit_outputs: bool = False
    # execute: each input in QNN shared memory (QnnExecuTorchAllocCustomMem), not the heap
    shared_inputs: bool = False
    # execute: (input index, output index) pairs: that input takes that output of the module's
    # previous execute instead of its file's data (a decode loop feeding the KV caches back)
    feed: tuple[tuple[int, int], ...] = ()
    backend: str | None = None
    key: str | None = None
    value: OptionValue | None = None  # set_option
    type: str = "int"  # get_option: the type the caller expects
    steps: tuple[ScenarioStep, ...] = ()  # parallel
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def flat(self) -> tuple[ScenarioStep, ...]:
        """The steps this step applies: its sub-steps for `parallel`, else itself."""
        return self.steps if self.op == "parallel" else (self,)

    def tensors(self) -> tuple[TensorSpec, ...]:
        return (*self.inputs, *self.expected)


@dataclasses.dataclass(frozen=True)
class ScenarioFile:
    """A validated scenario document; `base` is the directory relative paths are read from
    (None when the document was validated without a file)."""

    steps: tuple[ScenarioStep, ...]
    name: str = ""
    watch_mappings: tuple[str, ...] = ()
    version: int = SCENARIO_VERSION
    base: Path | None = None

    def path(self, value: str) -> Path:
        """A path of the document as the runner reads it."""
        p = Path(value)
        return p if p.is_absolute() or self.base is None else self.base / p

    def files(self) -> list[str]:
        """Every program and tensor file the steps name, as written, each once."""
        names: dict[str, None] = {}
        for step in self.steps:
            for s in step.flat:
                if s.pte is not None:
                    names.setdefault(s.pte, None)
                for t in s.tensors():
                    names.setdefault(t.file, None)
        return list(names)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# JSON type names for messages, bool before int (a bool is an int in Python).
_JSON_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "bool"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
    (dict, "object"))


def _kind(v: Any) -> str:
    """A JSON type name for messages."""
    if v is None:
        return "null"
    return next((name for cls, name in _JSON_KINDS if isinstance(v, cls)), type(v).__name__)


class _StepReader:
    def __init__(self, raw: Any, where: str, ops: tuple[str, ...]) -> None:
        self.raw, self.where, self.ops = raw, where, ops

    def fail(self, what: str) -> typing.NoReturn:
        raise ScenarioError(f"{self.where}: {what}")

    def string(self, key: str) -> str:
        value = self.raw[key]
        if not isinstance(value, str) or not value:
            self.fail(f"field '{key}' must be a non-empty string, got {_kind(value)} {value!r}")
        return value

    def number(self, key: str) -> float:
        value = self.raw.get(key)
        if value is None:
            return 0.0
        if not _is_number(value) or not value >= 0:
            self.fail(f"field '{key}' must be a number >= 0, got {_kind(value)} {value!r}")
        return float(value)

    def option_value(self, value: Any, where: str) -> OptionValue:
        if isinstance(value, bool):
            return value
        if _is_int(value):
            low, high = OPTION_INT_RANGE
            if not low <= value <= high:
                self.fail(f"{where}: integer option value out of int range")
            return int(value)
        if isinstance(value, str):
            if len(value.encode()) > MAX_OPTION_STRING_BYTES:
                self.fail(f"{where}: string option value longer than "
                          f"{MAX_OPTION_STRING_BYTES} characters")
            return value
        self.fail(f"{where}: option values must be bool, int or string, got {_kind(value)}")

    def option_key(self, key: str, where: str) -> str:
        if not key or len(key.encode()) > MAX_OPTION_KEY_BYTES:
            self.fail(f"{where}: option key must have 1 to {MAX_OPTION_KEY_BYTES} characters")
        return key

    def backend_options(self) -> dict[str, dict[str, OptionValue]]:
        raw = self.raw.get("backend_options")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.fail(f"field 'backend_options' must be an object, got {_kind(raw)}")
        out: dict[str, dict[str, OptionValue]] = {}
        for backend, options in raw.items():
            if not isinstance(options, dict):
                self.fail(f"backend_options['{backend}'] must be an object")
            if not backend or len(backend.encode()) > MAX_BACKEND_NAME_BYTES:
                self.fail("backend_options: backend name must have 1 to "
                          f"{MAX_BACKEND_NAME_BYTES} characters")
            out[backend] = {}
            for key, value in options.items():
                where = f"backend_options['{backend}']['{key}']"
                out[backend][self.option_key(key, where)] = self.option_value(value, where)
        if len(out) > MAX_BACKENDS:
            self.fail(f"backend_options: at most {MAX_BACKENDS} backends")
        return out

    def feed(self, inputs: int) -> tuple[tuple[int, int], ...]:
        raw = self.raw.get("feed")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.fail(f"field 'feed' must be an array, got {_kind(raw)}")
        pairs: list[tuple[int, int]] = []
        for i, pair in enumerate(raw):
            if not (isinstance(pair, list) and len(pair) == 2 and all(
                    _is_int(v) and 0 <= v <= MAX_SHAPE_ENTRY for v in pair)):
                self.fail(f"feed[{i}] must be [input index, output index], two non-negative "
                          "integers")
            if pair[0] >= inputs:
                self.fail(f"feed[{i}]: input {pair[0]} is not one of the step's {inputs} inputs")
            if any(pair[0] == p[0] for p in pairs):
                self.fail(f"feed[{i}]: input {pair[0]} is fed twice")
            pairs.append((int(pair[0]), int(pair[1])))
        return tuple(pairs)

    def tensors(self, key: str) -> tuple[TensorSpec, ...]:
        raw = self.raw.get(key)
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.fail(f"field '{key}' must be an array, got {_kind(raw)}")
        specs = []
        for i, t in enumerate(raw):
            where = f"{key}[{i}]"
            if not isinstance(t, dict):
                self.fail(f"{where} must be an object, got {_kind(t)}")
            dtype = t.get("dtype")
            if not isinstance(dtype, str):
                self.fail(f"{where}: missing string field 'dtype'")
            if dtype not in DTYPES:
                self.fail(f"{where}: unknown dtype '{dtype}' (expected "
                          f"{', '.join(list(DTYPES)[:-1])} or {list(DTYPES)[-1]})")
            shape = t.get("shape")
            if not isinstance(shape, list):
                self.fail(f"{where}: missing array field 'shape'")
            if not all(_is_int(d) and 0 <= d <= MAX_SHAPE_ENTRY for d in shape):
                self.fail(f"{where}: shape entries must be non-negative integers, got {shape!r}")
            file = t.get("file")
            if not isinstance(file, str) or not file:
                self.fail(f"{where}: missing string field 'file'")
            specs.append(TensorSpec(dtype, tuple(shape), file))
        return tuple(specs)

    def read(self) -> ScenarioStep:
        raw = self.raw
        if not isinstance(raw, dict) or raw.get("op") not in self.ops:
            self.fail(f"'op' must be one of {', '.join(self.ops)}, got "
                      f"{raw.get('op') if isinstance(raw, dict) else raw!r}")
        op = raw["op"]
        self.where = f"{self.where} ({op})"
        spec = OP_FIELDS[op]
        missing = [k for k in spec.required if raw.get(k) is None]
        if missing:
            self.fail(f"missing {', '.join(missing)}")
        known = {"op", *spec.required, *spec.optional}
        extra = {k: v for k, v in raw.items() if k not in known}
        fields: dict[str, Any] = {}
        if "module" in spec.required:
            fields["module"] = self.string("module")
        if "method" in spec.required:
            fields["method"] = self.string("method")
        if op == "load_module":
            fields["pte"] = self.string("pte")
            fields["backend_options"] = self.backend_options()
            mode = raw.get("load_mode")
            if mode is not None and mode not in LOAD_MODES:
                self.fail(f"field 'load_mode' must be one of {', '.join(LOAD_MODES)}, got "
                          f"{_kind(mode)} {mode!r}")
            fields["load_mode"] = mode or DEFAULT_LOAD_MODE
        elif op == "execute":
            fields["inputs"] = self.tensors("inputs")
            fields["expected"] = self.tensors("expected")
            fields["atol"] = self.number("atol")
            fields["rtol"] = self.number("rtol")
            emit = raw.get("emit_outputs")
            if emit is not None and not isinstance(emit, bool):
                self.fail(f"field 'emit_outputs' must be a bool, got {_kind(emit)} {emit!r}")
            fields["emit_outputs"] = bool(emit)
            shared = raw.get("shared_inputs")
            if shared is not None and not isinstance(shared, bool):
                self.fail(f"field 'shared_inputs' must be a bool, got {_kind(shared)} {shared!r}")
            fields["shared_inputs"] = bool(shared)
            fields["feed"] = self.feed(len(fields["inputs"]))
        elif op in ("set_option", "get_option"):
            fields["backend"] = self.string("backend")
            fields["key"] = self.option_key(self.string("key"), "key")
            if op == "set_option":
                fields["value"] = self.option_value(raw["value"], "value")
            else:
                kind = raw.get("type")
                if kind is None:
                    kind = "int"
                if kind not in GET_OPTION_TYPES:
                    self.fail(f"field 'type' must be int, bool or string, got {kind!r}")
                fields["type"] = kind
        elif op == "parallel":
            fields["steps"] = self.substeps()
        return ScenarioStep(op, extra=extra, **fields)

    def substeps(self) -> tuple[ScenarioStep, ...]:
        subs = self.raw["steps"]
        if not isinstance(subs, list) or not 1 <= len(subs) <= MAX_PARALLEL:
            self.fail(f"'steps' must be a list of 1 to {MAX_PARALLEL} sub-steps")
        base = self.where.rsplit(" (", 1)[0]
        steps = [_StepReader(sub, f"{base} sub-step {j}", PARALLEL_OPS).read()
                 for j, sub in enumerate(subs)]
        check_distinct_modules([s.module for s in steps], self.where)
        return tuple(steps)


def check_distinct_modules(modules: list[str | None], where: str) -> None:
    """The sub-steps of a parallel step each name a different module."""
    seen: set[str | None] = set()
    for module in modules:
        if module in seen:
            raise ScenarioError(f"{where}: two sub-steps on module {module!r} (each sub-step "
                                "of a parallel step must use a different module)")
        seen.add(module)


def validate_scenario(doc: Any, base: Path | None = None) -> ScenarioFile:
    """Check a scenario document (the parsed JSON) against the protocol and return it typed.
    Raises ScenarioError naming the step and field. Files are not looked at
    (`missing_files`, `check_tensor_sizes`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ScenarioError("a scenario is an object with a 'steps' list")
    if "version" in doc and not (_is_int(doc["version"]) and doc["version"] == SCENARIO_VERSION):
        raise ScenarioError(f"unsupported scenario version {doc['version']!r} (this runner "
                            f"reads {SCENARIO_VERSION})")
    name = doc.get("name")
    if name is not None and not isinstance(name, str):
        raise ScenarioError(f"field 'name' must be a string, got {_kind(name)}")
    watch = doc.get("watch_mappings")
    if watch is not None and not (isinstance(watch, list)
                                  and all(isinstance(w, str) and w for w in watch)):
        raise ScenarioError("field 'watch_mappings' must be an array of paths")
    steps = tuple(_StepReader(raw, f"step {i}", OPS).read() for i, raw in enumerate(doc["steps"]))
    return ScenarioFile(steps, name or "", tuple(watch or ()), SCENARIO_VERSION, base)


def missing_files(scenario: ScenarioFile) -> list[str]:
    """The program and tensor files the scenario names that are not regular files, as
    written."""
    return [n for n in scenario.files() if not scenario.path(n).is_file()]


def check_tensor_sizes(scenario: ScenarioFile) -> None:
    """Each tensor file has the size its shape and dtype need; ScenarioError otherwise."""
    for i, step in enumerate(scenario.steps):
        for j, s in enumerate(step.flat):
            where = f"step {i}" + (f" sub-step {j}" if step.op == "parallel" else "")
            for key, specs in (("inputs", s.inputs), ("expected", s.expected)):
                for k, t in enumerate(specs):
                    size = scenario.path(t.file).stat().st_size
                    if size != t.nbytes:
                        raise ScenarioError(f"{where} ({s.op}): {key}[{k}]: tensor file {t.file} "
                                            f"has {size} bytes, shape and dtype need {t.nbytes}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> Any:
    """JSON as the protocol reads it: strict (no NaN or Infinity)."""
    return json.loads(text, parse_constant=_no_constant)


def load_scenario(path: Path) -> ScenarioFile:
    """Read, validate and check the files of the scenario file at `path`, as a runner does
    before its first step. Raises ScenarioError with the message a runner prints."""
    path = Path(path)
    try:
        doc = parse_json(path.read_text())
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from None
    return check_scenario(doc, path.resolve().parent, str(path))


def check_scenario(doc: Any, base: Path, where: str) -> ScenarioFile:
    """Validate a scenario document whose relative paths are in `base` and check its files,
    as `load_scenario` does for a file (`where` names it in the errors)."""
    try:
        scenario = validate_scenario(doc, base)
    except ScenarioError as exc:
        raise ScenarioError(f"cannot read scenario {where}: {exc}") from None
    missing = missing_files(scenario)
    if missing:
        raise ScenarioError(f"scenario {where} names missing files: {', '.join(missing)}")
    try:
        check_tensor_sizes(scenario)
    except (OSError, ScenarioError) as exc:
        raise ScenarioError(f"scenario {where}: {exc}") from None
    return scenario


# ---------------------------------------------------------------------------- typed events

Status = Literal["ok", "error", "mismatch"]
"""A step's status: `ok`; `error` (`error_code` is the runtime's Error value, or
`HARNESS_ERROR_CODE` for an error the runner found itself); `mismatch` (it ran, and its outputs
differ from `expected` beyond tolerance; `error_code` 0)."""

HARNESS_ERROR_CODE = -1
"""The `error_code` of a step error the runner found itself (a module that is not loaded, an
operation it cannot do), not one the runtime returned; never 0."""


@dataclasses.dataclass(frozen=True)
class Output:
    """One output tensor of an `execute` step; `data` (base64 of its little-endian bytes) only
    when the step asked for `emit_outputs`."""

    dtype: str
    shape: list[int]
    sha256: str
    data: str | None = None


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


@dataclasses.dataclass(frozen=True)
class EndEvent:
    event: Literal["end"]
    status: Literal["ok", "failed"]
    steps: int
    failed_steps: int


Event = StartEvent | StepEvent | EndEvent
EVENT_TYPES: dict[str, type] = {"start": StartEvent, "step": StepEvent, "end": EndEvent}


class EventError(ValueError):
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
        raise EventError(f"an event is an object, got {_kind(raw)}")
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
        if (event.substeps is not None) != (event.op == "parallel"):
            raise EventError("step event: field 'substeps' must be given for a parallel step "
                             f"and only for it (op {event.op!r})")
    return event


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
                         f"{_kind(value)} {value!r}", path)

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
        if _is_int(value):
            return value
        fail()
    if tp is float:
        if _is_number(value):
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
