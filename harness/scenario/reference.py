"""The reference model: what must hold after each step of a scenario on a correct runtime.

It tracks which modules are alive and which of their methods are loaded, and from that predicts
the live QNN context count: every live module with at least one loaded method of a QNN program
holds its own context (the methods of one program share one), and nothing else holds any. Of a
program whose QNN delegates are known, only its delegated methods count: a method without a
delegate (an LLM export's `get_*` metadata) creates no context.
Backends and devices exist exactly while some context does.

A `parallel` step's effect is all of its sub-steps applied: they touch different modules, so
the order does not matter to the model, and the step is expected to succeed when every
sub-step is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from harness.programs.compile import CompiledModel, uses_qnn
from harness.scenario import Scenario, Step


@dataclasses.dataclass(frozen=True)
class Expected:
    """Predicted state after one step."""

    loaded: dict[str, frozenset[str]]  # live module -> loaded methods
    contexts: int
    step_ok: bool = True
    holders: frozenset[str] = frozenset()  # live modules that hold a QNN context

    def context_holders(self) -> set[str]:
        return set(self.holders)


def holds_context(model: CompiledModel, methods: Collection[str]) -> bool:
    """Whether a module of `model` with these methods loaded holds a QNN context."""
    if not methods or not uses_qnn(model.backend):
        return False
    delegated = {d["method"] for d in model.qnn_delegates}
    return bool(set(methods) & delegated) if delegated else True


def predict(scenario: Scenario, failed_loads: frozenset[int] = frozenset()) -> list[Expected]:
    """What must hold after each step; `failed_loads`: indices of load_method steps expected
    to fail (an injected failure), which load nothing."""
    loaded: dict[str, set[str]] = {}
    out: list[Expected] = []
    for i, step in enumerate(scenario.steps):
        ok = i in failed_loads or all([_apply(sub, loaded) for sub in step.flat])
        qnn = frozenset(m for m, methods in loaded.items()
                        if holds_context(scenario.models[m], methods))
        out.append(Expected({m: frozenset(v) for m, v in loaded.items()}, len(qnn), ok, qnn))
    return out


def _apply(step: Step, loaded: dict[str, set[str]]) -> bool:
    """Apply one (non-parallel) step to the model; whether a correct runtime accepts it."""
    ok = True
    # The module ops name their module (and method): Scenario builds them so.
    module, method = step.module or "", step.method or ""
    if step.op == "load_module":
        ok = module not in loaded
        loaded.setdefault(module, set())
    elif step.op in ("load_method", "execute"):
        ok = module in loaded and (step.op == "execute" or method not in loaded[module])
        if module in loaded:
            loaded[module].add(method)
    elif step.op == "unload_method":
        ok = method in loaded.get(module, set())
        loaded.get(module, set()).discard(method)
    elif step.op == "destroy_module":
        ok = loaded.pop(module, None) is not None
    return ok
