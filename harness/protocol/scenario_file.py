"""The scenario file a runner reads: its version, the ops and their fields (`OP_FIELDS`,
`PARALLEL_OPS`, `MAX_PARALLEL`), tensor dtypes (`DTYPES`), backend option limits, load modes,
and the validated document as types (`ScenarioFile`, `ScenarioStep`, `TensorSpec`).
`harness.protocol.scenario_check` checks a document against these rules.

Cheap to import: the standard library and `harness.errors` only.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

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
                                               "emit_outputs", "feed", "shared_inputs",
                                               "decode")),
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

VALUE_KINDS: dict[str, int | None] = {"int": 8, "float": 8, "boolean": 1, "string": None,
                                      "none": 0}
"""The non-tensor EValues a method can return (a metadata method of an LLM export returns
ints, doubles, bools and strings), by the `dtype` events and `expected` give them, and the
bytes of one item in a value file: int64 and float64 little-endian, one byte 0 or 1, the
string's UTF-8 bytes (any length), nothing. Shape [] is one value; [n] a list of n (the
runtime's IntList, DoubleList, BoolList); a string and none are always shape []. Only
`expected` takes them: the runners feed tensors only."""

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
    """A tensor file of an `execute` step (or, in `expected`, a non-tensor value's file:
    VALUE_KINDS); `file` as written (absolute, or relative to the
    scenario file's directory)."""

    dtype: str
    shape: tuple[int, ...]
    file: str

    @property
    def nbytes(self) -> int | None:
        """The file's size its dtype and shape need; None for a string (any length)."""
        size = DTYPES[self.dtype] if self.dtype in DTYPES else VALUE_KINDS[self.dtype]
        return None if size is None else math.prod(self.shape) * size

    @property
    def is_value(self) -> bool:
        """A non-tensor value (VALUE_KINDS), not a tensor."""
        return self.dtype in VALUE_KINDS


OptionValue = bool | int | str


@dataclasses.dataclass(frozen=True)
class DecodeSpec:
    """An execute's `decode`: how a decode step's inputs are built from the module's previous
    execute, as an LLM app's KV manager builds them (upstream's QNN llama runner, SMART_MASK
    layout): the token is the argmax of row `row` of the previous output `logits` (its last
    `vocab` entries a row), written to element 0 of input `token`; each cache input
    (input, output, axis) is the previous execute's same input (its first entries along `axis`,
    as many as both lengths hold) with the previous output's first `new` entries along `axis`
    written at `past`. Every other input (the mask, the positions) is the step's file."""

    token: int
    logits: int
    row: int
    vocab: int
    past: int
    new: int
    caches: tuple[tuple[int, int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"token": [self.token, self.logits, self.row, self.vocab], "past": self.past,
                "new": self.new, "caches": [list(c) for c in self.caches]}


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
    decode: DecodeSpec | None = None  # execute: a decode step's inputs from the previous execute
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
    qnn_nemesis: tuple[str, ...] = ()  # rules for the QNN interposer (harness.protocol.nemesis)
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
