"""Which programs a HIL suite runs on: the built-in models by default, the user's with `--pte`.

A suite test takes the `hil_program` fixture and says what it runs on by default and what it
needs of a program:

    @pytest.mark.hil_programs("prefill_decode", precisions=("fp16", "int8"),
                              needs=("qnn", "two_methods"))
    def test_s2(hil_program, scenario_driver): ...

Without `--pte` it is parametrized over the named built-in model in each precision (ids
`prefill_decode-fp16`); with `--pte` over the user's programs instead (ids: the file stems). A
program that lacks what the test needs is skipped with the reason, never silently.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.errors import ConfigError
from harness.programs.compile import CompiledModel, uses_qnn

MARKER = "hil_programs"
NEEDS = {
    "qnn": "a QNN delegate",
    "two_methods": "two methods with QNN delegates (sharing one context)",
    "multi_context": "a build with use_multi_contexts",
    "spill_fill": "a nonzero spill-fill buffer size in its QNN delegates",
    "xnnpack": "XNNPACK delegates and no QNN delegate (a control where QNN holds no state)",
    "stateful": "a method that mutates buffers, with a reference that carries its state",
    "decode_loop": "a decode loop (a built-in model's DECODE_LOOP, or an LLM export's "
                   "layout: harness.programs.llm)",
}


@dataclasses.dataclass(frozen=True)
class ProgramParam:
    """One value of `hil_program`: a built-in model build, or a user's program file."""

    needs: tuple[str, ...] = ()
    name: str = ""  # built-in model
    precision: str = "fp16"
    options: tuple[tuple[str, bool], ...] = ()  # QNN compile options of the built-in build
    pte: Path | None = None  # a user's program

    @property
    def id(self) -> str:
        if self.pte is not None:
            return self.pte.stem
        tags = "".join(f"-{k}" for k, v in self.options if v)
        return f"{self.name}-{self.precision}{tags}"


def params_for(mark, ptes: list[Path]) -> list[ProgramParam]:
    """The parametrization of a test marked `hil_programs(name, precisions=..., options=...,
    needs=...)`: the user's programs when there are any, else the built-in builds."""
    needs = tuple(mark.kwargs.get("needs", ()))
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise ConfigError(f"hil_programs needs: unknown {unknown}; known: {', '.join(NEEDS)}")
    if ptes:
        return [ProgramParam(needs, pte=p) for p in ptes]
    options = tuple(sorted((mark.kwargs.get("options") or {}).items()))
    precisions = mark.kwargs.get("precisions", ("fp16",))
    return [ProgramParam(needs, name, precision, options)
            for name in mark.args for precision in precisions]


def unique_ids(params: list[ProgramParam]) -> list[str]:
    """Test ids that say which program: the stem, numbered when two files share one."""
    ids = [p.id for p in params]
    return [f"{i}{ids[:n].count(i) + 1}" if ids.count(i) > 1 else i for n, i in enumerate(ids)]


def unmet_needs(model: CompiledModel, needs: tuple[str, ...]) -> str:
    """Why `model` cannot run a test with these needs, naming every need it lacks ("" when it
    can)."""
    qnn_methods = sorted({d["method"] for d in model.qnn_delegates}) if model.qnn_delegates \
        else (sorted(model.methods) if uses_qnn(model.backend) else [])
    have = {"qnn": (uses_qnn(model.backend), f"its backend: {model.backend}"),
            "two_methods": (len(qnn_methods) >= 2,
                            f"its QNN methods: {', '.join(qnn_methods) or 'none'}"),
            "multi_context": (bool(model.options.get("multi_contexts")),
                              "not built with use_multi_contexts"),
            "spill_fill": (bool(model.spill_fill_bytes), "no spill-fill size in its delegates"),
            "xnnpack": ("xnnpack" in model.backend.split("+") and not uses_qnn(model.backend),
                        f"its backend: {model.backend}"),
            # A method with no usable reference still runs them: each says so (undefined).
            "stateful": (any(r.sequence or (r.stateful and r.undefined)
                             for r in model.methods.values()),
                         "no method mutates a buffer (`python -m harness inspect` lists a "
                         "program's mutable buffers)"),
            "decode_loop": (bool(model.decode_loop),
                            "no decode method kv_forward (`python -m harness inspect` shows "
                            "an LLM export's layout)")}
    missing = [f"{NEEDS[n]} ({have[n][1]})" for n in needs if not have[n][0]]
    if not missing:
        return ""
    return f"program {model.name} ({model.pte.name}) lacks " + "; and ".join(missing)
