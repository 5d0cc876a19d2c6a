"""A user's own `.pte` as a model the suites can drive: inputs, and reference outputs from a solo
run on the device (the run itself: harness.drive.solo).

A program brought with `--pte` has no eager model to compute a CPU reference, so the reference
is the program itself, run alone: one module, nothing else live, each method executed once on
fixed inputs. Every later execute of that method on the same inputs, whatever else is live,
must give the same outputs within `PROGRAM_ATOL`/`PROGRAM_RTOL`.

Inputs come from a fixed seed (floats uniform in [-1, 1), booleans; integers all 0, the one
value that indexes any non-empty dimension; an attention mask the program's metadata describes,
from it), or from files beside the program:
`<program>.inputs/<method>/<index>.npy` (numpy's .npy, one file per input, dtype and shape as
the program declares them).

What the program was compiled for is read from it (harness.programs.pte), never assumed: a program
whose QNN delegates were compiled for another SoC than the device's is refused before any run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.programs.compile import CompiledModel, MethodReference
from harness.errors import ModelError
from harness.programs.pte import ProgramInfo, TensorSpec
from harness.protocol.scenario_file import FLOAT_DTYPES
from harness.protocol.tensors import DTYPES, TensorFile, numpy_dtype, write_array

SOLO_REFERENCE = ("the program's own solo run (one module, nothing else live; it has no "
                  "ETRecord, so a runtime that is consistently wrong agrees with it)")
PROGRAM_ATOL = 1e-4
PROGRAM_RTOL = 1e-4
INPUT_SEED = 0


MEANING_TOLERANCE = {"fp32": (PROGRAM_ATOL, PROGRAM_RTOL), "fp16": (0.02, 0.02),
                     "quantized": (0.1, 0.1)}
"""(atol, rtol) against a reference computed on CPU in float32 (an ETRecord's edge program),
by the program's QNN precision, as the registry models' TOLERANCE: an fp16 delegate rounds
(2.4e-4 on an accumulator of values in [-1, 1)), which the solo run's own 1e-4 would call
wrong."""


def meaning_tolerance(info: ProgramInfo) -> tuple[float, float]:
    """(atol, rtol) of the program against its meaning (MEANING_TOLERANCE)."""
    return MEANING_TOLERANCE[_precision(info)]


def backend_of(info: ProgramInfo) -> str:
    """"qnn", "xnnpack", "qnn+xnnpack" (delegates of both), or "portable" (no delegate)."""
    names = [n for backend, n in (("QnnBackend", "qnn"), ("XnnpackBackend", "xnnpack"))
             if backend in info.backends]
    return "+".join(names) or "portable"


def check_soc(info: ProgramInfo, device_soc: str, target: str) -> None:
    """Refuse a program with a QNN delegate that has no context for the target's SoC
    (`target` names it, e.g. "the HTP simulator" or "device R3CX..."), naming every SoC the
    program was compiled for. A delegate may carry contexts for several SoCs (FCB): the check is
    membership, not equality."""
    missing = [d for d in info.qnn_delegates if device_soc not in d.socs]
    if missing:
        socs = ", ".join(info.socs)
        raise ModelError(
            f"{info.path}: compiled for {socs} (its QNN delegates' compile spec"
            f"{'s' if len(info.socs) > 1 else ''}), but {target} is {device_soc}: recompile the "
            f"program for {device_soc} (soc_model in generate_qnn_executorch_compiler_spec) or "
            f"run it on {' or '.join(f'an {s}' for s in missing[0].socs)} device")


def _precision(info: ProgramInfo) -> str:
    fp16 = {d.use_fp16 for d in info.qnn_delegates}
    if not fp16:
        return "fp32"
    return "fp16" if fp16 == {True} else "quantized"


def inputs_dir(pte: Path) -> Path:
    """Where a user puts the inputs of `pte`: `<program>.inputs/` beside it."""
    return pte.with_name(pte.stem + ".inputs")


INTEGER_INPUT_VALUE = 0
"""Generated integer inputs are all this value: the one index valid in every non-empty
dimension, so a generated index, token id or position keeps any program well defined (random
integers read out of bounds or make a delegate fail; give real values in `.inputs/`)."""


CONTEXT_KEY = "get_max_context_len"
"""The metadata method an LLM export (the Qualcomm llama flow) says its context length with."""


def mask_context(info: ProgramInfo, spec: TensorSpec) -> int | None:
    """The context length when `spec` is an attention mask the program's metadata describes:
    an unsigned integer input [..., ar, ctx] of a program whose `get_max_context_len` is ctx
    (the flow's quantized mask: the dtype's maximum where a position is attended, 0 where
    not); None otherwise."""
    ctx = info.metadata.get(CONTEXT_KEY)
    if (not isinstance(ctx, int) or isinstance(ctx, bool) or not spec.dtype.startswith("uint")
            or len(spec.shape) < 2 or spec.shape[-1] != ctx or not 0 < spec.shape[-2] <= ctx):
        return None
    return ctx


def causal_mask(spec: TensorSpec):
    """The mask of a first step from an empty cache, as the flow's runner starts: row i of the
    ar new tokens attends the cache slots (ctx - ar) .. (ctx - ar + i), nothing before them."""
    import numpy as np

    ar, ctx = spec.shape[-2], spec.shape[-1]
    dtype = numpy_dtype(spec.dtype)
    rows = np.zeros((ar, ctx), dtype=dtype)
    for i in range(ar):
        rows[i, ctx - ar:ctx - ar + i + 1] = np.iinfo(dtype).max
    return np.broadcast_to(rows, tuple(spec.shape)).copy()


def generated_how(spec: TensorSpec, info: ProgramInfo | None = None) -> str | None:
    """How a generated input of `spec` is made, or None when it cannot be generated."""
    if info is not None and mask_context(info, spec) is not None:
        return (f"the causal attention mask of a first step ({CONTEXT_KEY} "
                f"{info.metadata[CONTEXT_KEY]}: the newest {spec.shape[-2]} slots attended)")
    if spec.dtype in FLOAT_DTYPES:
        return "uniform in [-1, 1)"
    if spec.dtype == "bool":
        return "random booleans"
    if spec.dtype in DTYPES:
        return f"all {INTEGER_INPUT_VALUE} (a valid index into any non-empty dimension)"
    return None


def _generated(spec: TensorSpec, rng):
    import numpy as np

    shape = tuple(spec.shape)
    dtype = numpy_dtype(spec.dtype)
    if spec.dtype in FLOAT_DTYPES:
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    if spec.dtype == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    return np.full(shape, INTEGER_INPUT_VALUE, dtype=dtype)


def _unfeedable(info: ProgramInfo, method: str, index: int, spec: TensorSpec) -> ModelError:
    kind = "a tensor of dtype" if spec.shape or spec.dtype in DTYPES else "a non-tensor value of kind"
    return ModelError(
        f"{info.path}: method {method!r} input {index} is {kind} {spec.dtype} ({spec}), which "
        f"the runners cannot feed: they feed tensors of {', '.join(DTYPES)}")


def _read_npy(source: Path, info: ProgramInfo, method: str, index: int, spec: TensorSpec):
    import numpy as np

    try:
        array = np.load(source, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ModelError(f"{source}: not a readable .npy file: {exc}") from None
    if spec.dtype == "bfloat16" and array.dtype.kind == "V" and array.dtype.itemsize == 2:
        array = array.view(numpy_dtype("bfloat16"))  # np.save writes ml_dtypes' bfloat16 as V2
    got = "bool" if array.dtype == np.bool_ else array.dtype.name
    if tuple(array.shape) != tuple(spec.shape) or got != spec.dtype:
        raise ModelError(
            f"{source}: {got}{list(array.shape)}, but {info.path.name} method "
            f"{method!r} input {index} is {spec}")
    return array


DESCRIBABLE_VALUES = ("int", "double", "bool", "string", "null", "intlist", "doublelist",
                      "boollist")
"""The program's names (its EValue kinds, lower case) of the non-tensor outputs both runners
report (harness.protocol.values); a TensorList or OptionalTensorList output they cannot."""


def check_outputs(info: ProgramInfo) -> None:
    """A ModelError naming the program, method and output index of the first output neither
    runner can describe, so a session refuses the program once, at start-up."""
    for name, method in info.methods.items():
        for i, spec in enumerate(method.outputs):
            if spec.planned is None and spec.dtype not in DTYPES and \
                    spec.dtype not in DESCRIBABLE_VALUES:
                raise ModelError(
                    f"{info.path}: method {name!r} output {i} is a {spec.dtype} value, which "
                    "the runners cannot describe (they report tensors, and int, double, bool, "
                    "string and none values and lists of int, double or bool)")


def input_arrays(info: ProgramInfo) -> dict[str, list]:
    """Per method, its input arrays: from `<program>.inputs/` when the user gave them, else
    generated from INPUT_SEED. A ModelError names program, method, input index and dtype of the
    first input that cannot be fed, so a session refuses the program once, at start-up."""
    import numpy as np

    given = inputs_dir(info.path)
    out: dict[str, list] = {}
    for name, method in info.methods.items():
        rng = np.random.default_rng(INPUT_SEED)
        arrays = []
        for i, spec in enumerate(method.inputs):
            source = given / name / f"{i}.npy"
            if spec.dtype not in DTYPES:
                raise _unfeedable(info, name, i, spec)
            if source.exists():
                arrays.append(_read_npy(source, info, name, i, spec))
            elif given.is_dir():
                raise ModelError(f"{given} has no {name}/{i}.npy for input {i} ({spec}) of method "
                                 f"{name!r}: give every input of the method, or none")
            elif mask_context(info, spec) is not None:
                arrays.append(causal_mask(spec))
            else:
                arrays.append(_generated(spec, rng))
        out[name] = arrays
    return out


def describe_inputs(info: ProgramInfo) -> list[str]:
    """What `inspect` says about the inputs the suites will feed: per input, the file it is
    read from or how it is generated, or why it cannot be fed."""
    given = inputs_dir(info.path)
    lines = []
    for name, method in info.methods.items():
        for i, spec in enumerate(method.inputs):
            source = given / name / f"{i}.npy"
            how = generated_how(spec, info)
            if how is None:
                text = f"cannot be fed (the runners feed tensors of {', '.join(DTYPES)})"
            elif source.exists():
                text = f"from {source}"
            elif given.is_dir():
                text = f"missing: {source} (give every input of the method, or none)"
            else:
                text = f"generated, {how}"
            lines.append(f"{name} input {i} {spec}: {text}")
    stateful = sorted({b.method for b in info.mutable_buffers if info.methods[b.method].inputs})
    if stateful and not given.is_dir():
        lines.append(f"{', '.join(stateful)}: stateful, so generated float and boolean inputs "
                     f"are drawn again for each execute since a load (1..{STATE_INPUTS}), for "
                     "the state's evolution to show")
    if any(m.inputs for m in info.methods.values()) and not given.is_dir():
        lines.append(f"(give real inputs as {given}/<method>/<index>.npy)")
    return lines


def make_inputs(info: ProgramInfo, out_dir: Path) -> dict[str, tuple[TensorFile, ...]]:
    """Per method, its inputs (`input_arrays`) as raw tensor files in `out_dir`."""
    return {name: tuple(write_array(a, out_dir / name / f"in{i}.bin") for i, a in enumerate(arrays))
            for name, arrays in input_arrays(info).items()}


STATE_INPUTS = 8
"""Input sets of a stateful method with generated inputs: one per execute since a load, as
many as its reference covers (harness.drive.solo.SOLO_STATE_EXECUTES)."""


def state_input_arrays(info: ProgramInfo, method: str, first: list) -> list[list]:
    """The inputs of a stateful method's executes 1..STATE_INPUTS since a load: `first`, then
    further draws of the same generator (floats and booleans change from execute to execute;
    integers, masks and given inputs stay what they are). One input every time would hide a
    state whose outputs do not depend on the step: a running mean started at zero gives the
    input whatever came before, so a second Module continuing the first's state looks right.
    A single set when the user gave the inputs, or none of them changes."""
    import numpy as np

    if inputs_dir(info.path).is_dir():
        return [first]
    rng = np.random.default_rng(INPUT_SEED)
    specs = info.methods[method].inputs
    for spec in specs:  # the draws `input_arrays` made for the first execute
        if mask_context(info, spec) is None:
            _generated(spec, rng)
    out = [first]
    for _ in range(STATE_INPUTS - 1):
        out.append([a if mask_context(info, spec) is not None else _generated(spec, rng)
                    for a, spec in zip(first, specs)])
    changing = any(not np.array_equal(a, b) for later in out[1:] for a, b in zip(first, later))
    return out if changing else [first]


def program_model(info: ProgramInfo, soc: str, work_dir: Path) -> CompiledModel:
    """The program as a CompiledModel whose methods have inputs but no expected outputs yet
    (see `with_reference`)."""
    arrays = input_arrays(info)
    inputs = make_inputs(info, work_dir / "inputs")
    buffers: dict[str, tuple[str, ...]] = {}
    for b in info.mutable_buffers:
        buffers[b.method] = (*buffers.get(b.method, ()), b.name)
    methods = {name: MethodReference(inputs[name], (), (), buffers.get(name, ()))
               for name in info.methods}
    for name in buffers:
        sets = state_input_arrays(info, name, arrays[name])
        if len(sets) > 1:
            sequence = (inputs[name],) + tuple(
                tuple(write_array(a, work_dir / "inputs" / name / f"in{i}_exec{n + 1}.bin")
                      for i, a in enumerate(arrays_n))
                for n, arrays_n in enumerate(sets) if n)
            methods[name] = dataclasses.replace(methods[name], input_sequence=sequence)
    delegates = tuple({"method": d.method, "use_multi_contexts": d.use_multi_contexts,
                       "max_sf_buf_size": d.max_sf_buf_size} for d in info.qnn_delegates)
    sizes = [d.max_sf_buf_size for d in info.qnn_delegates]
    return CompiledModel(
        name=info.path.stem, backend=backend_of(info), soc=soc, precision=_precision(info),
        pte=info.path, methods=methods, atol=PROGRAM_ATOL, rtol=PROGRAM_RTOL,
        options={"multi_contexts": True} if info.multi_context else {},
        spill_fill_bytes=max(sizes) if info.multi_context and sizes else None,
        qnn_delegates=delegates, reference=SOLO_REFERENCE)


def constant_references(info: ProgramInfo, out_dir: Path) -> dict[str, MethodReference]:
    """Per constant method (`ProgramInfo.constants`: an LLM export's metadata methods), its
    reference from the values the program serializes, as value files
    (harness.protocol.values): such a method has no graph, so an ETRecord holds no edge
    program for it, and what it must return is what the program says."""
    from harness.protocol.values import value_bytes

    refs = {}
    for name, values in info.constants.items():
        expected = []
        for i, (kind, value) in enumerate(values):
            path = out_dir / name / f"out{i}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(value_bytes(kind, value))
            expected.append(TensorFile(kind, (), path))
        refs[name] = MethodReference((), tuple(expected))
    return refs
