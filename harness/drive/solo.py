"""A user's program's solo run: one module, nothing else live, each method executed once (a
stateful one SOLO_STATE_EXECUTES times) with its outputs reported in full, and the reference
read back from it when the program has no better one (harness.programs.user says why).

The solo run is made twice, each in a new runner process whose heap glibc fills differently
(MALLOC_PERTURB_: fresh allocations get the complement of the byte, freed ones the byte):
an output element that differs between the two was read from memory nobody wrote, so it is no
reference for anything (`uninitialised_reads`). Such a method is marked (MethodReference.
undefined) with the words of `unusable_words`, naming the elements and the mutable buffers
inspect found, and is not judged by its outputs.

It lives with the driver, not with the program, because it is a scenario run on the session's
device and read back from its result.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

from harness.errors import ModelError
from harness.programs.compile import CompiledModel
from harness.programs.pte import MutableBuffer, ProgramInfo
from harness.programs.user import describe_inputs, inputs_dir
from harness.protocol.tensors import TensorFile
from harness.results.failures import Failure
from harness.results.run import ScenarioResult, StepResult
from harness.scenario import Scenario

SOLO_STATE_EXECUTES = 8
"""Executes of a stateful method (one with a mutable buffer) in the solo run: the n-th execute
of any Module is held to the solo run's n-th."""
SOLO_MODULE = "solo"


def solo_executes(model: CompiledModel, method: str) -> int:
    """How often the solo run executes `method`: a stateful one SOLO_STATE_EXECUTES times."""
    return SOLO_STATE_EXECUTES if model.methods[method].stateful else 1


def solo_scenario(model: CompiledModel) -> Scenario:
    """One module, each method executed once (a stateful one SOLO_STATE_EXECUTES times) with
    its outputs reported in full."""
    sc = Scenario(f"solo_{_safe(model.name)}")
    sc.load_module(SOLO_MODULE, model)
    for method in model.methods:
        for _ in range(solo_executes(model, method)):
            sc.execute(SOLO_MODULE, method, emit_outputs=True)
    return sc.destroy_module(SOLO_MODULE)


HEAP_FILLS = ("85", "170")
"""MALLOC_PERTURB_ of the two solo runs (0x55, 0xaa): fresh allocations filled with 0xaa, then
with 0x55, so no byte of memory nobody wrote is the same in both."""
SHOWN_ELEMENTS = 8


HEAP_ENV = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0",
            "MALLOC_MMAP_THRESHOLD_": "33554432"}
"""Beside MALLOC_PERTURB_: glibc's per-thread cache hands a freed chunk back as it was, never
filled (a recycled 512-byte buffer read the same bytes in both runs), so it is off; and
allocations up to 32 MiB (glibc's largest threshold) come from the heap, which is filled,
not from fresh zero pages (which hid a 3 MiB buffer nobody initialised)."""


def perturbed(scenario: Scenario, fill: str) -> Scenario:
    """`scenario` in a new runner process whose heap glibc fills with `fill`."""
    sc = copy.deepcopy(scenario)
    sc.name = f"{scenario.name}_heap{fill}"[:64]
    sc.run_env = {**scenario.run_env, **HEAP_ENV, "MALLOC_PERTURB_": fill}
    return sc


@dataclasses.dataclass(frozen=True)
class UninitialisedRead:
    """Elements of one output of one execute that differ between the two solo runs."""

    method: str
    execute: int  # since the module loaded the method, from 1
    output: int
    elements: tuple[int, ...]
    size: int

    def describe(self) -> str:
        shown = ", ".join(map(str, self.elements[:SHOWN_ELEMENTS]))
        more = f", ... ({len(self.elements) - SHOWN_ELEMENTS} more)" \
            if len(self.elements) > SHOWN_ELEMENTS else ""
        return (f"{self.method} execute {self.execute} output {self.output}: "
                f"{len(self.elements)} of {self.size} element(s) (index {shown}{more})")


def _solo_executes(model: CompiledModel,
                   result: ScenarioResult) -> Iterator[tuple[str, int, StepResult]]:
    """(method, execute number, its step result) of the solo run `result`, in order."""
    index = 1
    for method in model.methods:
        runs = solo_executes(model, method)
        for n, step in enumerate(result.steps[index:index + runs]):
            yield method, n + 1, step
        index += runs


def uninitialised_reads(model: CompiledModel, first: ScenarioResult,
                        second: ScenarioResult) -> list[UninitialisedRead]:
    """Output elements of the two solo runs (`perturbed` with each of HEAP_FILLS) whose bytes
    differ: read from memory nobody wrote. Executes that did not report their bytes in both
    runs are not compared."""
    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    out = []
    for (method, n, a), (_, _, b) in zip(_solo_executes(model, first),
                                         _solo_executes(model, second)):
        outs_a = (a.event or {}).get("outputs") or []
        outs_b = (b.event or {}).get("outputs") or []
        for j, (x, y) in enumerate(zip(outs_a, outs_b)):
            if "data" not in x or "data" not in y or x.get("dtype") != y.get("dtype"):
                continue
            if x.get("sha256") == y.get("sha256"):
                continue
            try:
                width = np.dtype(numpy_dtype(x["dtype"])).itemsize
            except (ValueError, TypeError):
                continue
            bx, by = base64.b64decode(x["data"]), base64.b64decode(y["data"])
            if len(bx) != len(by) or len(bx) % width:
                continue
            rows_x = np.frombuffer(bx, dtype=np.uint8).reshape(-1, width)
            rows_y = np.frombuffer(by, dtype=np.uint8).reshape(-1, width)
            differ = np.flatnonzero((rows_x != rows_y).any(axis=1))
            if differ.size:
                out.append(UninitialisedRead(method, n, j, tuple(int(i) for i in differ),
                                             len(rows_x)))
    return out


UNINITIALISED_PATTERN = "the program's solo run read uninitialised memory"
"""The words a known issue's `match` names an unusable reference by (in `unusable_words`)."""


NO_REFERENCE = "so its outputs have no reference and are not judged"


def unusable_words(info: ProgramInfo, reads: list[UninitialisedRead],
                   consequence: str = NO_REFERENCE) -> dict[str, str]:
    """Per method with uninitialised reads, why its solo run is no reference: the elements,
    what follows (`consequence`: no reference, or that another reference judges them), and
    the mutable buffers inspect found (where a buffer nobody initialises is the likely
    source)."""
    out = {}
    for method in dict.fromkeys(r.method for r in reads):
        mine = [r for r in reads if r.method == method]
        shown = "; ".join(r.describe() for r in mine[:4])
        if len(mine) > 4:
            shown += f"; and {len(mine) - 4} more output(s)"
        buffers = [b for b in info.mutable_buffers if b.method == method]
        if buffers:
            held = "; ".join(b.describe() for b in buffers)
            why = f"the mutable buffers inspect found: {held}"
        else:
            why = ("inspect found no mutable buffer: the method itself reads memory it never "
                   "writes (an empty tensor, an output it does not fill)")
        out[method] = (f"{info.path.name}: {UNINITIALISED_PATTERN} in method {method!r}: made "
                       f"twice with the heap filled differently (MALLOC_PERTURB_="
                       f"{' and '.join(HEAP_FILLS)}), its outputs differ in {shown}; "
                       f"{consequence}; {why}")
    return out


def with_undefined(model: CompiledModel, words: dict[str, str]) -> CompiledModel:
    """`model` with the methods of `words` marked as having no usable reference."""
    methods = {name: (dataclasses.replace(ref, expected=(), sequence=(), variants=(),
                                          zero_start=(), undefined=words[name],
                                          uninitialised=words[name])
                      if name in words else ref)
               for name, ref in model.methods.items()}
    return dataclasses.replace(model, methods=methods)


def with_uninitialised(model: CompiledModel, words: dict[str, str],
                       reads: list[UninitialisedRead] | tuple[()] = ()) -> CompiledModel:
    """`model` with the methods of `words` marked as reading uninitialised memory on this
    runtime, their reference (another one than the solo run) kept, and per output the
    elements `reads` found (over every execute)."""
    methods = {}
    for name, ref in model.methods.items():
        if name not in words:
            methods[name] = ref
            continue
        mine = [r for r in reads if r.method == name]
        outputs = max((r.output + 1 for r in mine), default=0)
        elements = tuple(tuple(sorted({e for r in mine if r.output == j for e in r.elements}))
                         for j in range(outputs))
        methods[name] = dataclasses.replace(ref, uninitialised=words[name],
                                            uninitialised_elements=elements)
    return dataclasses.replace(model, methods=methods)


def solo_failure_text(info: ProgramInfo, failure: Failure, artifacts: Path) -> str:
    """Why a program has no reference: the failing step of its solo run with the runtime's own
    log lines of that step, and where its inputs come from (a generated input may be what the
    program cannot take)."""
    words = failure.message.strip().splitlines()
    lines = [f"{info.path}: the solo run (one module, each method once, nothing else live) "
             f"failed, so the program has no reference output: {failure.describe()}"]
    if len(words) > 1:
        lines.append("the runtime's log lines of that step:")
        lines += [f"  {w}" for w in words[1:][-20:]]
    given = inputs_dir(info.path)
    if given.is_dir():
        lines.append(f"its inputs were read from {given}")
    else:
        how = describe_inputs(info)[:-1]
        shown = "; ".join(how[:6]) + (f"; and {len(how) - 6} more" if len(how) > 6 else "")
        lines.append(f"its inputs were generated ({shown}); if the program needs other values, "
                     f"give them as {given}/<method>/<index>.npy")
    lines.append(f"artifacts: {artifacts}")
    return "\n".join(lines)


def with_reference(model: CompiledModel, result: ScenarioResult, out_dir: Path) -> CompiledModel:
    """`model` with each method's expected outputs taken from its solo run `result` (of a
    stateful method, the sequence of its executes): a tensor's bytes, and a non-tensor value's
    (an int, a double, a bool, a string: harness.protocol.values) as its value file, so later
    executes are compared with it by value (a double within tolerance, the rest exactly)."""
    methods = {}
    index = 1
    for method in model.methods:
        runs = solo_executes(model, method)
        steps, index = result.steps[index:index + runs], index + runs
        sequence: list[tuple[TensorFile, ...]] = []
        for n, step in enumerate(steps):
            outputs = (step.event or {}).get("outputs") or []
            if step.status not in ("ok", "mismatch"):  # a mismatch: judged against a meaning
                raise ModelError(f"{model.pte}: the solo run of method {method!r} (one module, "
                                 f"nothing else live) failed, so it has no reference: "
                                 f"{step.describe()}")
            if any("data" not in o for o in outputs):  # a runner that does not say them
                sequence = []  # held to other executes by their hashes only
                break
            expected = []
            for j, o in enumerate(outputs):
                tag = "" if n == 0 else f"_exec{n + 1}"
                path = out_dir / method / f"out{j}{tag}.bin"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(base64.b64decode(o["data"]))
                expected.append(TensorFile(o["dtype"], tuple(o["shape"]), path))
            sequence.append(tuple(expected))
        ref = model.methods[method]
        if not sequence:
            methods[method] = ref
            continue
        methods[method] = dataclasses.replace(
            ref, expected=sequence[0], sequence=tuple(sequence) if ref.stateful else ())
    return dataclasses.replace(model, methods=methods)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:48] or "program"


def undefined_start(info: ProgramInfo, method: str) -> list[MutableBuffer]:
    """The mutable buffers of `method` whose start ExecuTorch leaves undefined: held by the
    runtime, with no initial value serialized (exported without InitializedMutableBufferPass;
    exir/emit/_emitter.py emits no data for them)."""
    return [b for b in info.mutable_buffers if b.method == method and b.initialized is False]


def start_words(info: ProgramInfo) -> str:
    """What the session says once of a program whose state starts undefined; "" for none."""
    buffers = [b for b in info.mutable_buffers if b.initialized is False]
    if not buffers:
        return ""
    names = ", ".join(f"{b.name} of {b.method}" for b in buffers)
    return (f"{info.path.name}: the program serializes no initial value for its mutable "
            f"buffer(s) {names} (held by the ExecuTorch runtime), so ExecuTorch leaves their "
            "start undefined: its executes are judged by how the state advances from the start "
            "the runtime gives (each Module and each reload alike), not against an initial "
            "value; export it with InitializedMutableBufferPass for the initial value to hold")


def _matches(step: StepResult, expected: tuple[TensorFile, ...], atol: float,
             rtol: float) -> bool:
    """Whether the outputs `step` reported are `expected` within tolerance."""
    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    outputs = (step.event or {}).get("outputs") or []
    if len(outputs) != len(expected):
        return False
    for out, want in zip(outputs, expected):
        if "data" not in out or out.get("dtype") != want.dtype:
            return False
        try:
            got = np.frombuffer(base64.b64decode(out["data"]), dtype=numpy_dtype(out["dtype"]))
            ref = np.fromfile(want.file, dtype=numpy_dtype(want.dtype))
        except (OSError, ValueError, TypeError):
            return False
        if got.shape != ref.shape or not np.allclose(got.astype(np.float64),
                                                     ref.astype(np.float64), atol=atol,
                                                     rtol=rtol):
            return False
    return True


def judged_against_meaning(model: CompiledModel, result: ScenarioResult, info: ProgramInfo,
                           out_dir: Path) -> tuple[CompiledModel, list[str]]:
    """The solo run `result` of `model` (whose reference is the program's meaning, an
    ETRecord's edge program) judged against that meaning first, per method:

    - every execute agrees: the meaning stays the reference;
    - the method's state starts undefined (`undefined_start`) and every execute is what the
      edge program gives from a zero start: the runtime advanced the state as the program
      says from the start it gave, so the solo run becomes the reference (each Module and
      each reload must go the same way), and a finding says so;
    - otherwise the runtime's solo run is wrong for the program: the meaning stays the
      reference, a finding names the first execute that differs, and every execute of the
      program reports its outputs (CompiledModel.emit_outputs), so each suite's mismatch
      names its pattern, which a known issue matches.

    Methods with no usable reference (MethodReference.undefined) are left as they are.
    Returns the model and the findings (said once per session)."""
    solo = with_reference(model, result, out_dir)
    methods = dict(model.methods)
    notes: list[str] = []
    switched: list[str] = []
    wrong = False  # the runtime's solo run is wrong for some method: emit every output
    for method, ref in model.methods.items():
        steps = [(n, step) for m, n, step in _solo_executes(model, result) if m == method]
        if ref.undefined or all(step.ok for _, step in steps):
            continue
        if undefined_start(info, method) and len(ref.zero_start) >= len(steps) and all(
                _matches(step, ref.zero_start[n - 1], model.atol, model.rtol)
                for n, step in steps):
            methods[method] = dataclasses.replace(solo.methods[method],
                                                  zero_start=ref.zero_start)
            switched.append(method)
            continue
        n, step = next((n, step) for n, step in steps if not step.ok)
        wrong = True
        notes.append(f"{info.path.name}: its solo run (one module, nothing else live) "
                     f"disagrees with {model.reference} at execute {n} of {method!r}: "
                     f"{step.describe()}; every execute of it is judged against that reference")
    if not switched:
        return dataclasses.replace(model, methods=methods, emit_outputs=wrong), notes
    names = ", ".join(f"{b.name} of {b.method}" for m in switched for b in undefined_start(info, m))
    words = (f"{model.reference} for what is defined: method(s) {', '.join(switched)} start "
             f"their state undefined ({names}: no initial value serialized), so their executes "
             "are held to the program's own solo run, which the edge program gives from a zero "
             "start")
    notes.append(f"{info.path.name}: its solo run gives what its edge program gives with the "
                 f"undefined buffer(s) {names} started at zero: the runtime advances the state "
                 "as the program says from the start it gave")
    return dataclasses.replace(model, methods=methods, reference=words,
                               emit_outputs=wrong), notes
