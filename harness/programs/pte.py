"""Facts read from a serialized ExecuTorch program (`.pte`): what it was compiled for.

A test that runs a `.pte` on a phone should not trust the name of the file or the cache
directory it came from: the program itself says which methods it has, what its inputs look like,
which backends its delegates need and, for QNN delegates, which SoC and HTP options they were
compiled with (the compile spec `qnn_compile_spec`, a `QnnExecuTorchOptions` flatbuffer). A
program built for SM8750 fails to initialize on an SM8650 phone, so knowing this before a device
is reserved turns a confusing runtime failure into a clear skip or error.

Reading the program needs executorch's Python serializer, whose imports (torch, exir) take
seconds; `harness.programs.pte_reader.read_program` therefore runs `inspect_program` in a child
process, so the pytest process never imports torch, and keeps the answer in the program cache
(`harness.programs.pte_cache`). Bad files are reported as `ModelError`s naming the file,
checked cheaply (size, file identifier, extended header) before anything imports executorch.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from harness.errors import ModelError

# Flatbuffer file identifier of ExecuTorch programs (bytes 4..8), from `file_identifier` in
# executorch's exir/_serialize/program.fbs; "ET12" for every executorch 1.x program.
FILE_IDENTIFIER = b"ET12"
# Optional extended header right after the flatbuffer's 8-byte prefix: magic, header length,
# program (flatbuffer) size, segment base offset, segment data size (all little-endian).
EXTENDED_HEADER_MAGIC = b"eh00"
MIN_PROGRAM_BYTES = 8  # root table offset + file identifier
# Version of the JSON written by to_json(); cached answers of another version are re-read.
JSON_FORMAT = 5

# ExecuTorch ScalarType enum names -> torch-style dtype names (executorch/exir/scalar_type.py).
SCALAR_TYPES = {
    "BYTE": "uint8", "CHAR": "int8", "SHORT": "int16", "INT": "int32", "LONG": "int64",
    "HALF": "float16", "FLOAT": "float32", "DOUBLE": "float64", "COMPLEX32": "complex32",
    "COMPLEX64": "complex64", "COMPLEX128": "complex128", "BOOL": "bool", "QINT8": "qint8",
    "QUINT8": "quint8", "QINT32": "qint32", "BFLOAT16": "bfloat16", "QUINT4X2": "quint4x2",
    "QUINT2X4": "quint2x4", "BITS16": "bits16", "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E4M3FN": "float8_e4m3fn", "FLOAT8E5M2FNUZ": "float8_e5m2fnuz",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz", "UINT16": "uint16", "UINT32": "uint32",
    "UINT64": "uint64",
}
QNN_BACKEND_ID = "QnnBackend"
QNN_COMPILE_SPEC_KEY = "qnn_compile_spec"  # executorch.backends.qualcomm.utils.constants


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """dtype and shape of one method input or output.

    Non-tensor values (an int or bool argument) carry their EValue kind in lower case ("int",
    "bool", "double", ...) and shape ()."""

    dtype: str
    shape: tuple[int, ...]
    # Whether the program memory-plans the tensor (MethodMeta's is_memory_planned): False for
    # the inputs and outputs of a program lowered with alloc_graph_input/output=False, whose
    # app owns their buffers; None for non-tensors and for specs not read from a program.
    planned: bool | None = dataclasses.field(default=None, compare=False)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclasses.dataclass(frozen=True)
class QnnDelegate:
    """What one QNN delegate's compile spec says: the runtime builds its context from this."""

    method: str
    soc: str  # QcomChipset enum name, e.g. "SM8650"
    soc_model: int  # its number, e.g. 57 for SM8650
    htp_arch: int | None  # e.g. 75; None when the spec carries no HTP info
    backend_type: str  # "htp", "gpu", "dsp", "lpai"
    use_fp16: bool | None  # HTP precision fp16; None for a non-HTP backend
    use_multi_contexts: bool
    max_sf_buf_size: int  # spill-fill buffer size in bytes (0: none set)
    # Every SoC the delegate carries a context for: one, or several for a program with contexts
    # for several SoCs (FCB, QAIRT 2.48+: one compile spec per SoC); `soc` is the first.
    socs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "socs", tuple(self.socs) or (self.soc,))


PROGRAM_SHAPES = {
    "delegated-mutable-buffer": "a mutable buffer inside a QNN delegate",
    "undefined-start-buffer": "a mutable buffer held by the runtime with no initial value",
    "two-delegated-methods": "two or more methods with QNN delegates (one shared context)",
}
"""Program shapes inspect finds (ProgramInfo.shapes), by name, with what each means."""


@dataclasses.dataclass(frozen=True)
class MutableBuffer:
    """A buffer a method mutates: its state lives across executes of one Module.

    `holder` is who keeps its storage: "runtime" (the ExecuTorch method's planned memory, the
    update copied back by an `aten::copy_` the program carries) or a backend id (the delegate
    owns it: a QNN mutable buffer lowered with `skip_mutable_buffer=False`). `initialized` says
    whether the program carries its initial value (InitializedMutableBufferPass); None when
    the holder's format does not tell (inside a delegate)."""

    method: str
    name: str  # the lowered placeholder's name in a delegate ("b_k_cache"), else "value N"
    holder: str
    spec: TensorSpec | None = None
    initialized: bool | None = None

    @property
    def delegated(self) -> bool:
        return self.holder != "runtime"

    def describe(self) -> str:
        where = ("held by the ExecuTorch runtime (planned memory)" if not self.delegated
                 else f"inside the {self.holder} delegate")
        init = {True: "initial value serialized", False: "no initial value serialized (its "
                "state starts undefined)", None: "its initial value is the delegate's to load "
                "(the program does not show it)"}[self.initialized]
        spec = f" {self.spec}" if self.spec is not None else ""
        return f"mutable buffer {self.name}{spec} of {self.method}: {where}; {init}"


# Tensor names upstream's QNN builder gives a delegated mutable buffer's graph input
# (backends/qualcomm/builders/node_visitor.py: "input_{id}_mutbuf_{index}_{name}@{wrapper}").
QNN_MUTABLE_BUFFER_NAME = re.compile(rb"input_\d+_mutbuf_(\d+)_([A-Za-z0-9_.]+?)@\d+")


@dataclasses.dataclass(frozen=True)
class MethodInfo:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    delegates: tuple[str, ...]  # backend ids of the method's delegates, in plan order

    @property
    def unplanned_inputs(self) -> tuple[int, ...]:
        """Indices of the tensor inputs the program does not memory-plan."""
        return tuple(i for i, t in enumerate(self.inputs) if t.planned is False)

    @property
    def unplanned_outputs(self) -> tuple[int, ...]:
        """Indices of the tensor outputs the program does not memory-plan: a runner must bind
        buffers of its own to them (set_output_data_ptr) before every execute."""
        return tuple(i for i, t in enumerate(self.outputs) if t.planned is False)

    def planning_text(self) -> str:
        """`inspect`'s line on who owns the method's I/O buffers."""
        def part(what: str, specs: tuple[TensorSpec, ...], unplanned: tuple[int, ...]) -> str:
            tensors = [i for i, t in enumerate(specs) if t.planned is not None]
            if not tensors:
                return f"{what} -"
            if not unplanned:
                return f"{what} planned"
            if len(unplanned) == len(tensors):
                return f"{what} not planned"
            return f"{what} {', '.join(map(str, unplanned))} not planned"
        text = (f"{part('inputs', self.inputs, self.unplanned_inputs)}, "
                f"{part('outputs', self.outputs, self.unplanned_outputs)}")
        if self.unplanned_inputs or self.unplanned_outputs:
            text += " (the app owns those buffers; the runners bind their own)"
        return text


@dataclasses.dataclass(frozen=True)
class ProgramInfo:
    """Everything the harness reads from one `.pte` file."""

    path: Path
    size: int
    sha256: str
    methods: dict[str, MethodInfo]
    qnn_delegates: tuple[QnnDelegate, ...]
    # Values of the constant methods (no inputs, one int, float or bool output), e.g. an LLM
    # export's get_max_context_len: what the program says about itself.
    metadata: dict[str, int | float | bool] = dataclasses.field(default_factory=dict)
    mutable_buffers: tuple[MutableBuffer, ...] = ()
    # Every constant method's outputs as (kind, value) pairs (kinds of
    # harness.protocol.scenario_file.VALUE_KINDS): a method with no inputs, no instruction and
    # only int, double, bool or string outputs, which returns what the program serializes
    # (the metadata methods of an LLM export, `get_kv_output_N_quant_attr` included).
    constants: dict[str, tuple[tuple[str, int | float | bool | str], ...]] = dataclasses.field(
        default_factory=dict)

    @property
    def stateful(self) -> bool:
        """Whether some method carries state across executes (a mutable buffer)."""
        return bool(self.mutable_buffers)

    @property
    def shapes(self) -> frozenset[str]:
        """The PROGRAM_SHAPES this program has: what a known issue's `programs:` names, so an
        entry for a defect of a program shape covers a user's program of that shape."""
        delegated = {d.method for d in self.qnn_delegates}
        found = {"delegated-mutable-buffer": any(b.delegated for b in self.mutable_buffers),
                 "undefined-start-buffer": any(b.initialized is False
                                               for b in self.mutable_buffers),
                 "two-delegated-methods": len(delegated) >= 2}
        return frozenset(name for name, has in found.items() if has)

    @property
    def backends(self) -> tuple[str, ...]:
        """Distinct backend ids over all methods, sorted (what the runtime must have linked)."""
        return tuple(sorted({d for m in self.methods.values() for d in m.delegates}))

    @property
    def socs(self) -> tuple[str, ...]:
        """Distinct SoCs the QNN delegates were compiled for, sorted (one for most builds,
        several for a program with contexts for several SoCs)."""
        return tuple(sorted({soc for d in self.qnn_delegates for soc in d.socs}))

    @property
    def multi_context(self) -> bool:
        return any(d.use_multi_contexts for d in self.qnn_delegates)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": JSON_FORMAT,
            "path": str(self.path),
            "size": self.size,
            "sha256": self.sha256,
            "methods": {
                name: {"inputs": [_spec_json(t) for t in m.inputs],
                       "outputs": [_spec_json(t) for t in m.outputs],
                       "delegates": list(m.delegates)}
                for name, m in self.methods.items()},
            "qnn_delegates": [{**dataclasses.asdict(d), "socs": list(d.socs)}
                              for d in self.qnn_delegates],
            "metadata": self.metadata,
            "constants": {name: [list(v) for v in values]
                          for name, values in self.constants.items()},
            "mutable_buffers": [
                {"method": b.method, "name": b.name, "holder": b.holder,
                 "delegated": b.delegated, "initialized": b.initialized,
                 "spec": _spec_json(b.spec) if b.spec is not None else None}
                for b in self.mutable_buffers],
            # Derived, for readers of `inspect --json`; from_json ignores them.
            "backends": list(self.backends),
            "socs": list(self.socs),
            "multi_context": self.multi_context,
            "shapes": sorted(self.shapes),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgramInfo:
        if data.get("format") != JSON_FORMAT:
            raise ModelError(f"program JSON format {data.get('format')!r}, expected {JSON_FORMAT}")
        methods = {
            name: MethodInfo(name, tuple(_spec(t) for t in m["inputs"]),
                             tuple(_spec(t) for t in m["outputs"]), tuple(m["delegates"]))
            for name, m in data["methods"].items()}
        return cls(Path(data["path"]), int(data["size"]), data["sha256"], methods,
                   tuple(QnnDelegate(**{**d, "socs": tuple(d.get("socs") or ())})
                         for d in data["qnn_delegates"]), dict(data.get("metadata") or {}),
                   tuple(MutableBuffer(b["method"], b["name"], b["holder"],
                                       _spec(b["spec"]) if b.get("spec") else None,
                                       b.get("initialized"))
                         for b in data.get("mutable_buffers") or ()),
                   # Required: an entry written before constants were read is read again
                   # (KeyError); older harnesses ignore the field in newer entries.
                   {name: tuple((str(k), v) for k, v in values)
                    for name, values in data["constants"].items()})

    def describe(self) -> str:
        """The human-readable text of `python -m harness inspect`."""
        lines = [f"{self.path}", f"  size: {self.size} bytes, sha256 {self.sha256[:12]}"]
        for m in self.methods.values():
            lines.append(f"  method {m.name}:")
            lines.append(f"    inputs:    {_specs_text(m.inputs)}")
            lines.append(f"    outputs:   {_specs_text(m.outputs)}")
            lines.append(f"    delegates: {', '.join(m.delegates) or '(none: portable CPU ops)'}")
            lines.append(f"    memory:    {m.planning_text()}")
            if m.name in self.constants:  # what a metadata method returns, as serialized
                shown = ", ".join(json.dumps(v) for _, v in self.constants[m.name])
                lines.append(f"    returns:   {shown} (constant)")
        lines.append(f"  backends: {', '.join(self.backends) or '(none)'}")
        if self.qnn_delegates:
            lines.append(f"  SoC: {', '.join(self.socs)}")
            lines.append(f"  QNN multi-context: {'yes' if self.multi_context else 'no'}")
            for d in self.qnn_delegates:
                arch = f"v{d.htp_arch}" if d.htp_arch is not None else "?"
                precision = {True: "fp16", False: "quantized", None: "-"}[d.use_fp16]
                socs = (f"{d.soc} (soc_model {d.soc_model})" if len(d.socs) == 1
                        else f"{', '.join(d.socs)} (a context for each)")
                lines.append(
                    f"  QNN delegate of {d.method}: {socs}, "
                    f"{d.backend_type} arch {arch}, {precision}, "
                    f"multi-context {'on' if d.use_multi_contexts else 'off'}, "
                    f"spill-fill {d.max_sf_buf_size} bytes")
        if self.mutable_buffers:
            lines += [f"  {b.describe()}" for b in self.mutable_buffers]
        else:
            lines.append("  mutable buffers: none (no method carries state across executes)")
        if self.shapes:  # what a known issue's `programs:` may name
            lines.append(f"  program shapes: {', '.join(sorted(self.shapes))}")
        return "\n".join(lines)


def _spec_json(t: TensorSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": t.dtype, "shape": list(t.shape)}
    if t.planned is not None:
        out["planned"] = t.planned
    return out


def _spec(data: dict[str, Any]) -> TensorSpec:
    return TensorSpec(data["dtype"], tuple(data["shape"]), data.get("planned"))


def _specs_text(specs: tuple[TensorSpec, ...]) -> str:
    return ", ".join(map(str, specs)) or "(none)"


# --- cheap checks, before anything imports executorch ------------------------------------------

def check_file(path: Path) -> int:
    """Raise ModelError unless `path` looks like an ExecuTorch program; return its size.

    Reads only the first 40 bytes, so a wrong path, a text file or a cut-off copy is reported in
    microseconds instead of after seconds of executorch imports (or as a flatbuffer traceback)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ModelError(f"{path}: a symbolic link loop (the link points back at itself), "
                             "not a .pte program file") from None
        raise ModelError(f"{path}: cannot read the program: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ModelError(f"{path}: is a directory, not a .pte program file")
    if not stat.S_ISREG(info.st_mode):
        # Opening a FIFO for reading waits for a writer: check the type before any open.
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "a device file")
        raise ModelError(f"{path}: is {kind}, not a regular .pte program file")
    size = info.st_size
    try:
        # Non-blocking: a file swapped for a FIFO since the stat must not wait for a writer.
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as handle:
            head = handle.read(40)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the program: {exc.strerror or exc}") from exc
    if size == 0:
        raise ModelError(f"{path}: is empty (0 bytes), not an ExecuTorch program")
    if size < MIN_PROGRAM_BYTES:
        raise ModelError(f"{path}: {size} bytes is too short to be an ExecuTorch program")
    ident = head[4:8]
    if ident != FILE_IDENTIFIER:
        if ident[:2] == b"ET":
            raise ModelError(
                f"{path}: an ExecuTorch program of another format version (file identifier "
                f"{ident.decode('ascii', 'replace')!r}); this harness reads "
                f"{FILE_IDENTIFIER.decode()!r} programs")
        raise ModelError(f"{path}: not an ExecuTorch program (bytes 4..8 are {ident!r}, an "
                         f"ExecuTorch .pte has the file identifier {FILE_IDENTIFIER.decode()!r})")
    if head[8:12] == EXTENDED_HEADER_MAGIC:
        # Sizes the serializer wrote: a copy cut short (an interrupted adb pull or download) is
        # named as such here, instead of seconds later as an unpack or segment-overflow error.
        header_len = int.from_bytes(head[12:16], "little")
        needed = 8 + max(header_len, 24)
        if size >= needed:
            program_size = int.from_bytes(head[16:24], "little")
            segment_base = int.from_bytes(head[24:32], "little")
            segment_size = int.from_bytes(head[32:40], "little") if header_len >= 32 else 0
            needed = max(program_size, segment_base + segment_size if segment_base else 0)
        if size < needed:
            raise ModelError(f"{path}: truncated ExecuTorch program: its header says "
                             f"{needed} bytes, the file has {size}")
    return size


# --- reading the program (imports executorch) -------------------------------------------------

def _enum_name(value: Any) -> str:
    return value.name if hasattr(value, "name") else str(value)


def _value_spec(value: Any) -> TensorSpec:
    """TensorSpec of one execution-plan EValue."""
    val = value.val
    if hasattr(val, "scalar_type") and hasattr(val, "sizes"):
        name = _enum_name(val.scalar_type).upper()
        # The emitter gives a tensor an allocation_info exactly when memory planning placed it
        # (what the runtime's MethodMeta reports as is_memory_planned).
        return TensorSpec(SCALAR_TYPES.get(name, name.lower()), tuple(int(s) for s in val.sizes),
                          getattr(val, "allocation_info", None) is not None)
    return TensorSpec(type(val).__name__.lower(), ())


def _constant(plan: Any) -> int | float | bool | None:
    """The value of a constant method (no inputs, one scalar output held in the plan)."""
    if plan.inputs or len(plan.outputs) != 1:
        return None
    val = plan.values[plan.outputs[0]].val
    for field in ("bool_val", "int_val", "double_val"):
        if hasattr(val, field):
            return getattr(val, field)
    return None


def _constant_values(plan: Any) -> tuple[tuple[str, int | float | bool | str], ...] | None:
    """A constant method's outputs as (kind, value) pairs, or None for any other method: no
    inputs, no delegate, no instruction, every output an int, double, bool or string."""
    if plan.inputs or plan.delegates or any(c.instructions for c in plan.chains):
        return None
    out: list[tuple[str, int | float | bool | str]] = []
    for index in plan.outputs:
        val = plan.values[index].val
        kind = type(val).__name__
        if kind == "Bool":  # VALUE_KINDS' "boolean" ("bool" is a tensor dtype)
            out.append(("boolean", bool(val.bool_val)))
        elif kind == "Int":
            out.append(("int", int(val.int_val)))
        elif kind == "Double":  # the schema writes an infinity as "inf" / "-inf"
            out.append(("float", float(val.double_val)))
        elif kind == "String":
            out.append(("string", str(val.string_val)))
        else:
            return None
    return tuple(out) if out else None


def _qnn_delegate(method: str, spec_value: bytes) -> QnnDelegate:
    from executorch.backends.qualcomm.serialization.qc_schema import (
        QnnExecuTorchHtpPrecision,
    )
    from executorch.backends.qualcomm.serialization.qc_schema_serialize import (
        flatbuffer_to_option,
    )

    options = flatbuffer_to_option(spec_value)
    soc = options.soc_info.soc_model
    htp_info = options.soc_info.htp_info
    arch = int(htp_info.htp_arch) if htp_info is not None else 0
    backend = options.backend_options
    htp = backend.htp_options
    return QnnDelegate(
        method=method,
        soc=_enum_name(soc),
        soc_model=int(soc),
        htp_arch=arch or None,  # HtpArch.NONE (0): no HTP info
        backend_type=str(backend.backend_type),  # its __str__ is "htp", "gpu", ...
        use_fp16=None if htp is None else htp.precision == QnnExecuTorchHtpPrecision.kHtpFp16,
        use_multi_contexts=bool(htp.use_multi_contexts) if htp is not None else False,
        max_sf_buf_size=int(htp.max_sf_buf_size) if htp is not None else 0,
    )


def _mutable_buffers(plan: Any, delegate_data: list[Any]) -> list[MutableBuffer]:
    """A method's mutable buffers: those the runtime holds (the destination of an
    `aten::copy_` that is not a method input) and those inside its QNN delegates (found by the
    tensor names upstream's QNN builder gives them in the context binary)."""
    out: list[MutableBuffer] = []
    seen: set[int] = set()
    for chain in plan.chains:
        for instruction in chain.instructions:
            args = instruction.instr_args
            if type(args).__name__ != "KernelCall":
                continue
            op = plan.operators[args.op_index]
            if op.name != "aten::copy_" or not args.args:
                continue
            index = int(args.args[0])
            if index in plan.inputs or index in seen:
                continue
            seen.add(index)
            val = plan.values[index].val
            out.append(MutableBuffer(plan.name, f"value {index}", "runtime",
                                     _value_spec(plan.values[index]),
                                     bool(getattr(val, "data_buffer_idx", 0))))
    for delegate in plan.delegates:
        if delegate.id != QNN_BACKEND_ID or delegate.processed.index >= len(delegate_data):
            continue
        blob = bytes(delegate_data[delegate.processed.index].data)
        names = dict.fromkeys(m.group(2).decode("ascii", "replace")
                              for m in QNN_MUTABLE_BUFFER_NAME.finditer(blob))
        out += [MutableBuffer(plan.name, name, QNN_BACKEND_ID) for name in names]
    return out


def _one_line(exc: BaseException) -> str:
    """`struct.error: unpack_from requires ...`: enough to tell the failures apart, no traceback."""
    kind = type(exc)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    lines = f"{name}: {exc}".strip().splitlines()
    return lines[0][:300] if lines else name


# Loggers that warn while executorch is imported (torchao's optional CUDA kernels, a torch
# pytree deprecation): noise on the stderr of `inspect` and of the child, nothing to act on.
IMPORT_NOISE_LOGGERS = ("torchao", "torch.utils._pytree")


def _quiet_import_noise() -> None:
    """Raise the import-noise loggers to ERROR, unless executorch is imported already or the
    application configured them itself."""
    import logging

    if "executorch.exir" in sys.modules:
        return
    for name in IMPORT_NOISE_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.ERROR)


def inspect_program(path: Path) -> ProgramInfo:
    """Read `path` in this process. Imports executorch (seconds); prefer `read_program`."""
    path = Path(path)
    size = check_file(path)
    data = path.read_bytes()
    _quiet_import_noise()
    from executorch.exir._serialize._program import deserialize_pte_binary

    try:
        program = deserialize_pte_binary(data).program
        methods: dict[str, MethodInfo] = {}
        delegates: list[QnnDelegate] = []
        metadata: dict[str, int | float | bool] = {}
        constants: dict[str, tuple[tuple[str, int | float | bool | str], ...]] = {}
        buffers: list[MutableBuffer] = []
        for plan in program.execution_plan:
            buffers += _mutable_buffers(plan, program.backend_delegate_data)
            if (value := _constant(plan)) is not None:
                metadata[plan.name] = value
            if (values := _constant_values(plan)) is not None:
                constants[plan.name] = values
            methods[plan.name] = MethodInfo(
                plan.name, tuple(_value_spec(plan.values[i]) for i in plan.inputs),
                tuple(_value_spec(plan.values[i]) for i in plan.outputs),
                tuple(d.id for d in plan.delegates))
            for delegate in plan.delegates:
                if delegate.id != QNN_BACKEND_ID:
                    continue
                found = []
                for spec in delegate.compile_specs:
                    if spec.key != QNN_COMPILE_SPEC_KEY:
                        continue
                    try:
                        found.append(_qnn_delegate(plan.name, bytes(spec.value)))
                    except Exception as exc:
                        raise ModelError(f"{path}: the QNN compile spec of method {plan.name} "
                                         f"does not decode ({_one_line(exc)})") from exc
                if found:  # one compile spec per SoC the delegate has a context for
                    socs = tuple(dict.fromkeys(d.soc for d in found))
                    delegates.append(dataclasses.replace(found[0], socs=socs))
    except ModelError:
        raise
    except Exception as exc:  # the flatbuffer reader raises struct.error, TypeError, ...
        raise ModelError(f"{path}: damaged or truncated ExecuTorch program, it does not "
                         f"deserialize ({_one_line(exc)})") from exc
    return ProgramInfo(path, size, hashlib.sha256(data).hexdigest(), methods, tuple(delegates),
                       metadata, tuple(buffers), constants)
