"""A user's own `.pte` as a model the suites can drive: inputs, and reference outputs from a solo
run on the device.

A program brought with `--pte` has no eager model to compute a CPU reference, so the reference
is the program itself, run alone: one module, nothing else live, each method executed once on
fixed inputs. Every later execute of that method on the same inputs, whatever else is live,
must give the same outputs within `PROGRAM_ATOL`/`PROGRAM_RTOL`.

Inputs come from a fixed seed (floats uniform in [-1, 1), integers in [0, 8), booleans), or
from files beside the program: `<program>.inputs/<method>/<index>.npy` (numpy's .npy, one file
per input, dtype and shape as the program declares them).

What the program was compiled for is read from it (harness.program), never assumed: a program
whose QNN delegates were compiled for another SoC than the device's is refused before any run.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

from harness.compile import CompiledModel, MethodReference
from harness.errors import ModelError
from harness.program import ProgramInfo, TensorSpec
from harness.tensors import DTYPES, TensorFile

PROGRAM_ATOL = 1e-4
PROGRAM_RTOL = 1e-4
INPUT_SEED = 0
SOLO_MODULE = "solo"


def backend_of(info: ProgramInfo) -> str:
    """"qnn", "xnnpack", "qnn+xnnpack" (delegates of both), or "portable" (no delegate)."""
    names = [n for backend, n in (("QnnBackend", "qnn"), ("XnnpackBackend", "xnnpack"))
             if backend in info.backends]
    return "+".join(names) or "portable"


def check_soc(info: ProgramInfo, device_soc: str, target: str) -> None:
    """Refuse a program whose QNN delegates were compiled for another SoC than the target's
    (`target` names it, e.g. "the HTP simulator" or "device R3CX..."); both SoCs are named."""
    other = [s for s in info.socs if s != device_soc]
    if other:
        raise ModelError(
            f"{info.path}: compiled for {', '.join(info.socs)} (its QNN delegates' compile spec), "
            f"but {target} is {device_soc}: recompile the program for {device_soc} "
            f"(soc_model in generate_qnn_executorch_compiler_spec) or run it on an {other[0]} "
            "device")


def _precision(info: ProgramInfo) -> str:
    fp16 = {d.use_fp16 for d in info.qnn_delegates}
    if not fp16:
        return "fp32"
    return "fp16" if fp16 == {True} else "quantized"


def inputs_dir(pte: Path) -> Path:
    """Where a user puts the inputs of `pte`: `<program>.inputs/` beside it."""
    return pte.with_name(pte.stem + ".inputs")


def _write(array, path: Path) -> TensorFile:
    import numpy as np

    array = np.ascontiguousarray(array)
    dtype = "bool" if array.dtype == np.bool_ else str(array.dtype)
    if dtype not in DTYPES:
        raise ModelError(f"{path}: dtype {dtype} is not one the runners read ({', '.join(DTYPES)})")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(array.astype(array.dtype.newbyteorder("<")).tobytes())
    return TensorFile(dtype, tuple(array.shape), path)


def _generated(spec: TensorSpec, rng):
    import numpy as np

    shape = tuple(spec.shape)
    if spec.dtype in ("float32", "float16"):
        return rng.uniform(-1.0, 1.0, shape).astype(spec.dtype)
    if spec.dtype == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    if spec.dtype in ("int64", "int32", "int8", "uint8"):
        return rng.integers(0, 8, shape).astype(spec.dtype)
    raise ModelError(f"input dtype {spec.dtype} is not one the runners can feed "
                     f"({', '.join(DTYPES)}); give the input as a file instead")


def make_inputs(info: ProgramInfo, out_dir: Path) -> dict[str, tuple[TensorFile, ...]]:
    """Per method, its inputs as raw tensor files in `out_dir`: from `<program>.inputs/` when the
    user gave them, else generated from INPUT_SEED."""
    import numpy as np

    given = inputs_dir(info.path)
    out: dict[str, tuple[TensorFile, ...]] = {}
    for name, method in info.methods.items():
        rng = np.random.default_rng(INPUT_SEED)
        files = []
        for i, spec in enumerate(method.inputs):
            source = given / name / f"{i}.npy"
            if source.exists():
                try:
                    array = np.load(source, allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise ModelError(f"{source}: not a readable .npy file: {exc}") from None
                if tuple(array.shape) != tuple(spec.shape) or str(array.dtype) != spec.dtype:
                    raise ModelError(
                        f"{source}: {array.dtype}{list(array.shape)}, but {info.path.name} method "
                        f"{name!r} input {i} is {spec}")
            elif given.is_dir():
                raise ModelError(f"{given} has no {name}/{i}.npy for input {i} ({spec}) of method "
                                 f"{name!r}: give every input of the method, or none")
            else:
                array = _generated(spec, rng)
            files.append(_write(array, out_dir / name / f"in{i}.bin"))
        out[name] = tuple(files)
    return out


def program_model(info: ProgramInfo, soc: str, work_dir: Path) -> CompiledModel:
    """The program as a CompiledModel whose methods have inputs but no expected outputs yet
    (see `with_reference`)."""
    inputs = make_inputs(info, work_dir / "inputs")
    methods = {name: MethodReference(inputs[name], ()) for name in info.methods}
    delegates = tuple({"method": d.method, "use_multi_contexts": d.use_multi_contexts,
                       "max_sf_buf_size": d.max_sf_buf_size} for d in info.qnn_delegates)
    sizes = [d.max_sf_buf_size for d in info.qnn_delegates]
    return CompiledModel(
        name=info.path.stem, backend=backend_of(info), soc=soc, precision=_precision(info),
        pte=info.path, methods=methods, atol=PROGRAM_ATOL, rtol=PROGRAM_RTOL,
        options={"multi_contexts": True} if info.multi_context else {},
        spill_fill_bytes=max(sizes) if info.multi_context and sizes else None,
        qnn_delegates=delegates)


def solo_scenario(model: CompiledModel):
    """One module, each method executed once with its outputs reported in full."""
    from harness.scenario import Scenario

    sc = Scenario(f"solo_{_safe(model.name)}")
    sc.load_module(SOLO_MODULE, model)
    for method in model.methods:
        sc.execute(SOLO_MODULE, method, emit_outputs=True)
    return sc.destroy_module(SOLO_MODULE)


def with_reference(model: CompiledModel, result, out_dir: Path) -> CompiledModel:
    """`model` with each method's expected outputs taken from its solo run `result`."""
    methods = {}
    for i, method in enumerate(model.methods):
        step = result.steps[1 + i]
        outputs = (step.event or {}).get("outputs") or []
        if not step.ok or any("data" not in o for o in outputs):
            raise ModelError(f"{model.pte}: the solo run of method {method!r} (one module, nothing "
                             f"else live) failed, so it has no reference: {step.describe()}")
        expected = []
        for j, o in enumerate(outputs):
            path = out_dir / method / f"out{j}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(o["data"]))
            expected.append(TensorFile(o["dtype"], tuple(o["shape"]), path))
        methods[method] = MethodReference(model.methods[method].inputs, tuple(expected))
    return dataclasses.replace(model, methods=methods)


def _safe(name: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:48] or "program"
