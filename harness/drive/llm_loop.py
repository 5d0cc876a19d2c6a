"""An LLM export's decode loop as a scenario the suites can drive, and its reference: the solo
run of the same loop (one module, nothing else live), whose outputs every later run of a step
is held to and whose tokens every lifecycle variant must reproduce.

The loop itself (the prompt, the masks and positions, how each step's token and KV caches are
built from the execute before it) is harness.programs.llm's `decode_loop_plan`; this module
runs it, because the reference is a run on the session's device.
"""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path
from typing import Protocol

from harness.errors import ModelError
from harness.programs.compile import CompiledModel
from harness.programs.llm import decode_loop_plan, is_llm_export, llm_layout
from harness.programs.pte import ProgramInfo
from harness.protocol.tensors import TensorFile
from harness.results.failures import run_failures
from harness.results.run import ScenarioResult
from harness.scenario import Scenario
from harness.scenario.library import decode_loop

LOOP_MODULE = "solo"


class Runs(Protocol):
    def run(self, scenario: Scenario, allow_crash: bool = ...) -> ScenarioResult: ...


def loop_tokens(result: ScenarioResult, module: str | None = None) -> list[int]:
    """The tokens a run's decode steps fed (those on `module` only, when given), in step order,
    a `parallel` step's sub-steps' too."""
    tokens = []
    for step in result.steps:
        event = step.event or {}
        for sub in [event, *(event.get("substeps") or ())]:
            if sub.get("token") is not None and module in (None, sub.get("module")):
                tokens.append(int(sub["token"]))
    return tokens


def with_decode_loop(model: CompiledModel, info: ProgramInfo, driver: Runs,
                     work: Path) -> CompiledModel:
    """`model` with its decode loop (CompiledModel.decode_loop) when the program is an LLM
    export: the loop's executes as variants of its methods, each step's expected outputs and
    the token sequence from the loop's solo run. A program that is no LLM export is returned
    as it is; one whose layout or solo loop fails carries the one error that says why
    (`decode_loop["error"]`), which a decode-loop test reports and no other test meets."""
    if not is_llm_export(info):
        return model
    try:
        plan = decode_loop_plan(info, llm_layout(info), work / "inputs")
    except ModelError as exc:
        return dataclasses.replace(model, decode_loop={"error": str(exc)})
    methods = dict(model.methods)
    positions = []
    for step in plan.steps:
        ref = methods[step.method]
        methods[step.method] = dataclasses.replace(ref, variants=(*ref.variants,
                                                                  (step.inputs, ())))
        positions.append(len(ref.variants) + 1)
    loop = {"after": plan.steps[0].method, "after_variant": positions[0],
            "method": plan.steps[1].method, "first_variant": positions[1],
            "steps": len(plan.steps) - 1, "decode": [s.decode for s in plan.steps[1:]],
            "prompt": list(plan.prompt), "describe": plan.describe()}
    pending = dataclasses.replace(model, methods=methods, decode_loop=loop)
    sc = Scenario("solo_decode_loop").load_module(LOOP_MODULE, pending)
    result = driver.run(decode_loop(sc, LOOP_MODULE, pending, emit_outputs=True)
                        .destroy_module(LOOP_MODULE), allow_crash=True)
    failures = run_failures(result)
    if failures:
        return dataclasses.replace(model, decode_loop={
            "error": f"the solo run of its decode loop ({plan.describe()}; one module, nothing "
                     f"else live) failed, so the loop has no reference: "
                     f"{failures[0].describe()}"})
    for n, (step, done) in enumerate(zip(plan.steps, result.steps[1:])):
        outputs = (done.event or {}).get("outputs") or []
        if any("data" not in o for o in outputs):
            return dataclasses.replace(model, decode_loop={
                "error": "the runner reported no output bytes of the decode loop's solo run, "
                         "so the loop has no reference"})
        expected = []
        for j, o in enumerate(outputs):
            path = work / "reference" / f"step{n}" / f"out{j}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(o["data"]))
            expected.append(TensorFile(o["dtype"], tuple(o["shape"]), path))
        ref = methods[step.method]
        variants = list(ref.variants)
        variants[positions[n] - 1] = (step.inputs, tuple(expected))
        methods[step.method] = dataclasses.replace(ref, variants=tuple(variants))
    loop["tokens"] = loop_tokens(result)
    return dataclasses.replace(model, methods=methods, decode_loop=loop)
