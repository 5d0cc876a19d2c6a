"""The named scenarios of the upstream fix "Isolate cached delegates by Module lifetime".

Built here once so the HIL suites, the benchmarks and anyone's own tests drive exactly the same
steps. `name` defaults to the scenario's id; pass another to keep artifacts apart.
"""

from __future__ import annotations

from harness.compile import CompiledModel
from harness.scenario import Scenario


def s1_two_modules(model: CompiledModel, destroy_first: str = "A", name: str = "") -> Scenario:
    """Two modules of one program both execute; destroy one; the other must still execute."""
    survivor = "B" if destroy_first == "A" else "A"
    sc = Scenario(name or f"s1_destroy_{destroy_first}")
    sc.load_module("A", model).load_module("B", model)
    sc.execute("A", "forward").execute("B", "forward")
    sc.destroy_module(destroy_first).execute(survivor, "forward")
    return sc.destroy_module(survivor).snapshot()


def s2_shared_context(model: CompiledModel, name: str = "") -> Scenario:
    """Both methods of one module loaded and executed (they must share one context)."""
    sc = Scenario(name or "s2_shared_context")
    sc.load_module("M", model).load_method("M", "prefill").load_method("M", "decode")
    sc.execute("M", "prefill").execute("M", "decode").snapshot()
    return sc.destroy_module("M").snapshot()


def s3_unload_one(model: CompiledModel, unload: str, name: str = "") -> Scenario:
    """Unload one method of a shared context; the other must still execute."""
    keep = "decode" if unload == "prefill" else "prefill"
    sc = Scenario(name or f"s3_unload_{unload}")
    sc.load_module("M", model).load_method("M", "prefill").load_method("M", "decode")
    sc.execute("M", "prefill").execute("M", "decode")
    sc.unload_method("M", unload).execute("M", keep)
    return sc.destroy_module("M").snapshot()


def s4_cleanup_reload(model: CompiledModel, cycles: int = 3, name: str = "") -> Scenario:
    """Destroy everything and load again, `cycles` times; a snapshot ends each cycle."""
    sc = Scenario(name or "s4_cleanup_reload")
    for _ in range(cycles):
        sc.load_module("A", model).load_module("B", model)
        sc.execute("A", "forward")
        sc.destroy_module("A")
        sc.load_module("A", model)
        sc.destroy_module("A").destroy_module("B").snapshot()
    return sc
