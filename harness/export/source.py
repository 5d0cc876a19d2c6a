"""The steps of a plan as source code: one call of a template function per step.

The C++ and Python exports differ only in how a call, a literal and a parallel step are
written (`Language`); which function a step calls, with which arguments, is decided here
once: `load_module(M, program, load_mode)`, `load_method(M, method)`, `execute(M, program, method,
inputs, expected, atol, rtol)`, `unload_method(M, method)`, `destroy_module(M)`, each with
the step's allowed-error flag last, between `begin(index, description)` and
`end(expected live contexts)`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from collections.abc import Callable

from harness.export.plan import Plan, PlanStep, Tensor


@dataclasses.dataclass(frozen=True)
class Language:
    comment: str  # line comment prefix
    end: str  # statement terminator
    indent: str  # of main()'s body
    literal: Callable[[object], str]  # str, bool, float or a tuple of Tensors
    module: Callable[[str], str]  # how a module is named in a call
    parallel: Callable[[list[tuple[str, str]]], list[str]]  # (description, call) per sub-step


def step_call(s: PlanStep) -> tuple[str, list]:
    """(template function, its arguments after the module) of a plain step."""
    if s.op == "load_module":
        return "load_module", [s.program, s.load_mode]
    if s.op == "execute":
        return "execute", [s.program, s.method, s.inputs, s.expected, s.atol, s.rtol]
    if s.op == "destroy_module":
        return "destroy_module", []
    return s.op, [s.method]  # load_method, unload_method


def call(s: PlanStep, lang: Language) -> str:
    function, args = step_call(s)
    if s.module is None:  # only module steps come here (not snapshots)
        raise ValueError(f"step {s.index} ({s.op}) names no module")
    values = [lang.module(s.module), *map(lang.literal, args), lang.literal(s.allowed)]
    return f"{function}({', '.join(values)})"


def statements(plan: Plan, lang: Language) -> str:
    """main()'s body: a comment, begin, the step's call(s) and end, for each step."""
    out: list[str] = []
    for s in plan.steps:
        out += ["", f"{lang.comment} step {s.index}: {s.description}",
                f"begin({s.index}, {lang.literal(s.description)}){lang.end}"]
        if s.op == "parallel":
            out += lang.parallel([(sub.description, call(sub, lang)) for sub in s.substeps])
        elif s.op != "snapshot":
            out.append(call(s, lang) + lang.end)
        out.append(f"end({s.contexts}){lang.end}")
    return "\n".join(lang.indent + line if line else "" for line in out)


def tensors(items: tuple[Tensor, ...], each: Callable[[Tensor], str], brackets: str) -> str:
    return brackets[0] + ", ".join(map(each, items)) + brackets[1]


def fill(template: Path, plan: Plan, language: str, lang: Language, **extra: str) -> str:
    """The template with the plan's scenario, ordering and steps (@@KEY@@ placeholders)."""
    text = template.read_text()
    values = {"TITLE": f"Standalone {language} reproduction of HIL scenario {plan.scenario}",
              "SOURCE": str(plan.source), "SCENARIO": plan.scenario, "ORDERING": plan.ordering,
              "ALLOWED": plan.allowed_note, "STEPS": statements(plan, lang), **extra}
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    return text
