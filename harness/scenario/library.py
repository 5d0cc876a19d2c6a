"""The named scenarios of the proposed upstream fix "Isolate cached delegates by Module lifetime"
(upstream PR 24462, in review).

Built here once so the HIL suites, the benchmarks and anyone's own tests drive exactly the same
steps. `name` defaults to the scenario's id; pass another to keep artifacts apart.
"""

from __future__ import annotations

from typing import Any

from harness.errors import ModelError
from harness.programs.compile import CompiledModel
from harness.protocol.scenario_file import ScenarioError
from harness.scenario import Scenario


def delegated_methods(model: CompiledModel) -> list[str]:
    """The methods with a QNN delegate, in program order (none for a program of another
    backend, or a built-in build whose delegates were not read)."""
    names = {d["method"] for d in model.qnn_delegates}
    return [m for m in model.methods if m in names]


def undelegated_methods(model: CompiledModel) -> list[str]:
    """The methods of a QNN program that have no QNN delegate (an LLM export's `get_*` metadata
    methods): run on the CPU, they create no context."""
    delegated = delegated_methods(model)
    return [m for m in model.methods if m not in delegated] if delegated else []


def first_method(model: CompiledModel) -> str:
    """The method a one-method scenario drives: the first delegated method (`forward` when it is
    one), else `forward` or the first method (a user's program may name its methods anything,
    and a metadata method must not stand in for a delegate)."""
    delegated = delegated_methods(model) or list(model.methods)
    return "forward" if "forward" in delegated else delegated[0]


def method_pair(model: CompiledModel) -> tuple[str, str]:
    """The two methods S2/S3 drive: `prefill` and `decode` when the program has them, else its
    first two delegated methods in program order (lowered together they share one context), or
    its first two methods."""
    if {"prefill", "decode"} <= set(model.methods):
        return "prefill", "decode"
    methods = delegated_methods(model) or list(model.methods)
    if len(methods) < 2:
        raise ModelError(f"program {model.name} has fewer than two methods: {', '.join(methods)}")
    return methods[0], methods[1]


def s1_two_modules(model: CompiledModel, destroy_first: str = "A", name: str = "") -> Scenario:
    """Two modules of one program both execute; destroy one; the other must still execute."""
    survivor = "B" if destroy_first == "A" else "A"
    method = first_method(model)
    sc = Scenario(name or f"s1_destroy_{destroy_first}")
    sc.load_module("A", model).load_module("B", model)
    sc.execute("A", method).execute("B", method)
    sc.destroy_module(destroy_first).label("first_destroyed")
    sc.execute(survivor, method).label("survivor_executed")
    return sc.destroy_module(survivor).snapshot().label("released")


def s2_shared_context(model: CompiledModel, name: str = "") -> Scenario:
    """Both methods of one module loaded and executed (they must share one context)."""
    first, second = method_pair(model)
    sc = Scenario(name or "s2_shared_context")
    sc.load_module("M", model).load_method("M", first).load_method("M", second).label("both_loaded")
    sc.execute("M", first).label("first_executed").execute("M", second).label("second_executed")
    sc.snapshot()
    return sc.destroy_module("M").snapshot().label("released")


def s3_unload_one(model: CompiledModel, unload: str, name: str = "") -> Scenario:
    """Unload one method of a shared context; the other must still execute. `unload` is a
    method name, or "first"/"second" of `method_pair`."""
    first, second = method_pair(model)
    unload = {"first": first, "second": second}.get(unload, unload)
    keep = second if unload == first else first
    sc = Scenario(name or f"s3_unload_{unload}")
    sc.load_module("M", model).load_method("M", first).load_method("M", second)
    sc.execute("M", first).execute("M", second)
    sc.unload_method("M", unload).label("unloaded").execute("M", keep).label("kept_executed")
    return sc.destroy_module("M").snapshot().label("released")


def s4_cleanup_reload(model: CompiledModel, cycles: int = 3, name: str = "") -> Scenario:
    """Destroy everything and load again, `cycles` times; a snapshot ends each cycle (labelled
    `cycle<N>_released`). The first
    cycle also executes each method without a delegate once (`undelegated_methods`)."""
    method = first_method(model)
    sc = Scenario(name or "s4_cleanup_reload")
    for cycle in range(cycles):
        sc.load_module("A", model).load_module("B", model)
        sc.execute("A", method)
        for other in undelegated_methods(model) if cycle == 0 else ():
            sc.execute("A", other)
        sc.destroy_module("A")
        sc.load_module("A", model)
        sc.destroy_module("A").destroy_module("B").snapshot().label(f"cycle{cycle}_released")
    return sc


def _loop(model: CompiledModel) -> dict[str, Any]:
    loop = model.decode_loop
    if loop.get("error"):  # an LLM export whose layout the loop cannot drive: say why
        raise ScenarioError(f"program {model.name}: {loop['error']}")
    if not loop:
        raise ScenarioError(f"model {model.name} has no decode loop (DECODE_LOOP, or an LLM "
                            "export's layout: harness.programs.llm)")
    return loop


def decode_prefill(sc: Scenario, module: str, model: CompiledModel,
                   emit_outputs: bool = False) -> Scenario:
    """Append the execute a decode loop starts with on `module`: the loop's first method on its
    prompt (an LLM export's prefill of the fixed prompt) or its reference inputs."""
    loop = _loop(model)
    return sc.execute(module, loop["after"], variant=loop.get("after_variant", 0),
                      emit_outputs=emit_outputs)


def decode_step(sc: Scenario, module: str, model: CompiledModel, k: int,
                emit_outputs: bool = False) -> Scenario:
    """Append step `k` (from 0) of `model`'s decode loop on `module`: its decode method on the
    loop's k-th variant, fed the outputs of the module's previous execute (a built-in model's
    `feed`), or with its token and caches built from them as an LLM app builds them (an LLM
    export's `decode`)."""
    loop = _loop(model)
    if not 0 <= k < loop["steps"]:
        raise ScenarioError(f"model {model.name}: its decode loop has {loop['steps']} steps, "
                            f"not a step {k + 1}")
    variant = loop["first_variant"] + k
    if loop.get("decode"):
        return sc.execute(module, loop["method"], variant=variant, decode=loop["decode"][k],
                          emit_outputs=emit_outputs)
    feed = tuple((int(i), int(o)) for i, o in loop["feed"])
    return sc.execute(module, loop["method"], variant=variant, feed=feed,
                      emit_outputs=emit_outputs)


def decode_loop(sc: Scenario, module: str, model: CompiledModel, steps: int | None = None,
                emit_outputs: bool = False) -> Scenario:
    """Append `model`'s decode loop on `module`: one execute of the loop's first method (an
    LLM export's prefill of its prompt), then `steps` (default: all the reference has)
    executes of its decode method, each fed by the execute before it, as an LLM runner feeds
    its KV caches; each judged against the reference's same step. `module` must be loaded."""
    loop = _loop(model)
    count = loop["steps"] if steps is None else steps
    if not 0 < count <= loop["steps"]:
        raise ScenarioError(f"model {model.name}: its decode loop has {loop['steps']} steps, "
                            f"not {count}")
    decode_prefill(sc, module, model, emit_outputs)
    for k in range(count):
        decode_step(sc, module, model, k, emit_outputs)
    return sc


SOAK_SHAPES = ("one_module", "two_modules", "unload_methods")
"""What a soak cycle does between loading and destroying: one module executing its first
method; two modules of the program (A and B, both executing); one module loading, executing
and unloading each of its methods (a program's two methods share one QNN context)."""


def soak(model: CompiledModel, cycles: int, shape: str = "one_module",
         load_mode: str | None = None, name: str = "") -> Scenario:
    """`cycles` load -> execute -> destroy cycles of `shape` (SOAK_SHAPES), each module loaded
    with `load_mode` (None: the runner's default); the destroy that ends cycle k, after which
    no module is live, is labelled `cycle<k>` (harness.results.soak fits its readings)."""
    if shape not in SOAK_SHAPES:
        raise ScenarioError(f"soak shape {shape!r} must be one of {', '.join(SOAK_SHAPES)}")
    if cycles < 1:
        raise ScenarioError(f"a soak needs at least one cycle, not {cycles}")
    method = first_method(model)
    methods = delegated_methods(model) or list(model.methods)
    sc = Scenario(name or f"soak_{shape}")
    for cycle in range(cycles):
        if shape == "two_modules":
            sc.load_module("A", model, load_mode=load_mode)
            sc.load_module("B", model, load_mode=load_mode)
            sc.execute("A", method).execute("B", method).destroy_module("A")
            sc.destroy_module("B")
        elif shape == "unload_methods":
            sc.load_module("A", model, load_mode=load_mode)
            for m in methods:
                sc.load_method("A", m)
            for m in methods:
                sc.execute("A", m)
            for m in methods:
                sc.unload_method("A", m)
            sc.destroy_module("A")
        else:
            sc.load_module("A", model, load_mode=load_mode).execute("A", method)
            sc.destroy_module("A")
        sc.label(f"cycle{cycle}")
    return sc
