"""A user's program's solo run: one module, nothing else live, each method executed once (a
stateful one SOLO_STATE_EXECUTES times) with its outputs reported in full, and the reference
read back from it when the program has no better one (harness.programs.user says why).

It lives with the driver, not with the program, because it is a scenario run on the session's
device and read back from its result.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from pathlib import Path

from harness.errors import ModelError
from harness.programs.compile import CompiledModel
from harness.programs.pte import ProgramInfo
from harness.programs.user import describe_inputs, inputs_dir
from harness.protocol.tensors import TensorFile
from harness.results.failures import Failure
from harness.results.run import ScenarioResult
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
            if not step.ok:
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
