"""Orderings: every interleaving of load / execute / unload / destroy over several modules.

Each module follows its own lifecycle (load the module, then for each method: load it, execute
it, optionally unload it; destroy the module last); an *ordering* interleaves those lifecycles.
`interleavings` enumerates all of them (exhaustive, for small cases), `random_interleavings`
draws some (seeded, for larger ones). `explore` runs each ordering in a fresh process, checks
it against the reference model, and shrinks the failures to the shortest ordering that still
fails the same way, so a report names a minimal reproduction rather than a 20-step one.

Modules with the same plan (program, methods, unloads, backend options) are interchangeable:
an ordering and the same ordering with two of them renamed drive the runtime alike, so
`interleavings(..., symmetric=True)` yields one ordering per class, the one in which such
modules are first loaded in name order (k interchangeable modules: k! times fewer runs).
`explore(driver, ..., jobs=N)` runs N orderings at once, each in its own process.
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Protocol
from collections.abc import Callable, Collection, Iterable, Iterator

from harness.results.assertions import (assert_isolation, assert_live_counts, assert_outputs_consistent,
                                assert_steps_ok)
from harness.programs.compile import CompiledModel
from harness.scenario.reference import predict
from harness.results.run import ScenarioResult
from harness.scenario import Scenario

Op = tuple[str, str, str | None]  # (op, module, method)


@dataclasses.dataclass(frozen=True)
class ModulePlan:
    """One module's lifecycle: which program, which methods, whether methods get unloaded."""

    name: str
    model: CompiledModel
    methods: tuple[str, ...] = ("forward",)
    unload: bool = False
    load_method: bool = True  # False: `execute` loads the method implicitly
    backend_options: tuple[tuple[str, tuple[tuple[str, object], ...]], ...] = ()

    @property
    def twin_key(self) -> tuple[object, ...]:
        """Plans with equal keys are interchangeable up to the module's name."""
        return (str(self.model.pte), self.methods, self.unload, self.load_method,
                self.backend_options)

    def ops(self) -> list[Op]:
        ops: list[Op] = [("load_module", self.name, None)]
        for m in self.methods:
            if self.load_method:
                ops.append(("load_method", self.name, m))
            ops.append(("execute", self.name, m))
            if self.unload:
                ops.append(("unload_method", self.name, m))
        return ops + [("destroy_module", self.name, None)]


STEP_ORDER = ("load_method", "execute", "unload_method")


def ready(op: Op, done: set[Op], planned: Collection[Op]) -> bool:
    """May `op` run now, given the operations `done` and those `planned` (a module's whole
    lifecycle, or the subset a search kept)? Module load first, destroy last after the
    module's other planned operations, per method load < execute < unload."""
    kind, module, method = op
    if kind == "load_module":
        return True
    if ("load_module", module, None) not in done:
        return False
    if kind == "destroy_module":
        return all(o in done for o in planned if o[1] == module and o[0] != "destroy_module")
    before = STEP_ORDER[:STEP_ORDER.index(kind)]
    return all((k, module, method) in done for k in before if (k, module, method) in planned)


def _twin_before(plans: list[ModulePlan]) -> dict[str, str]:
    """module -> the interchangeable module listed just before it (whose load must come first)."""
    before: dict[str, str] = {}
    last: dict[tuple[object, ...], str] = {}
    for plan in plans:
        if plan.twin_key in last:
            before[plan.name] = last[plan.twin_key]
        last[plan.twin_key] = plan.name
    return before


def _extensions(plans: list[ModulePlan], choose: Callable[[list[Op]], list[Op]],
                symmetric: bool = False) -> Iterator[list[Op]]:
    by_module = {p.name: p for p in plans}
    remaining = [op for p in plans for op in p.ops()]
    twins = _twin_before(plans) if symmetric else {}

    def ready_now(op: Op, done: set[Op]) -> bool:
        if op[0] == "load_module" and op[1] in twins and \
                ("load_module", twins[op[1]], None) not in done:
            return False
        return ready(op, done, by_module[op[1]].ops())

    def walk(prefix: list[Op], done: set[Op]) -> Iterator[list[Op]]:
        left = [op for op in remaining if op not in done]
        if not left:
            yield list(prefix)
            return
        ready = [op for op in left if ready_now(op, done)]
        for op in choose(ready):
            prefix.append(op)
            done.add(op)
            yield from walk(prefix, done)
            done.discard(op)
            prefix.pop()

    yield from walk([], set())


def interleavings(plans: list[ModulePlan], symmetric: bool = False) -> Iterator[list[Op]]:
    """Every ordering, in a stable order; with `symmetric`, one per class of orderings equal up
    to renaming interchangeable modules."""
    return _extensions(plans, lambda ready: ready, symmetric)


def pruning_factor(plans: list[ModulePlan]) -> int:
    """How many orderings each symmetric one stands for: the product of k! over the groups of
    k interchangeable modules."""
    import math
    from collections import Counter

    return math.prod(math.factorial(k) for k in Counter(p.twin_key for p in plans).values())


def random_interleavings(plans: list[ModulePlan], count: int, seed: int) -> list[list[Op]]:
    """`count` orderings drawn by picking uniformly among the ready operations at each step."""
    rng = random.Random(seed)
    return [next(_extensions(plans, lambda ready: [rng.choice(ready)])) for _ in range(count)]


def to_scenario(name: str, plans: list[ModulePlan], ops: list[Op]) -> Scenario:
    models = {p.name: p.model for p in plans}
    sc = Scenario(name)
    options = {p.name: {b: dict(kv) for b, kv in p.backend_options} for p in plans}
    for kind, module, method in ops:
        if kind == "load_module":
            sc.load_module(module, models[module], options[module] or None)
        elif kind == "destroy_module":
            sc.destroy_module(module)
        else:
            getattr(sc, kind)(module, method)
    return sc.snapshot()


def describe(ops: list[Op]) -> str:
    return ", ".join(f"{k}({m}{'.' + meth if meth else ''})" for k, m, meth in ops)


def check(result: ScenarioResult) -> str | None:
    """The first violated property of a run, as its assertion message; None when all hold."""
    for assertion in (assert_steps_ok, assert_outputs_consistent, assert_isolation, assert_live_counts):
        try:
            assertion(result)
        except AssertionError as exc:
            return str(exc)
    return None


def signature(message: str) -> str:
    """What kind of failure a message is, so shrinking keeps the same failure."""
    if "handle isolation violated" in message:
        return "isolation"
    if "live QNN counts" in message:
        return "live counts"
    match = re.search(r"step \d+ (\w+)\(.*?\): (\w+)", message)
    return f"{match.group(1)} {match.group(2)}" if match else message.splitlines()[0][:80]


@dataclasses.dataclass
class Failure:
    ops: list[Op]
    message: str
    minimal: list[Op]
    minimal_message: str


@dataclasses.dataclass
class Exploration:
    ran: int
    failures: list[Failure]

    def report(self) -> str:
        kinds: dict[str, Failure] = {}
        for f in self.failures:
            kinds.setdefault(signature(f.minimal_message), f)
        lines = [f"{len(self.failures)} of {self.ran} orderings failed; minimal failing ordering "
                 "of each kind of failure:"]
        for kind, f in kinds.items():
            lines += [f"- {kind}: {describe(f.minimal)}",
                      f"  (shrunk from: {describe(f.ops)})",
                      "  " + f.minimal_message.replace("\n", "\n  ")]
        return "\n".join(lines)


class Runner(Protocol):
    """What runs the orderings: `harness.drive.driver.ScenarioDriver`."""

    def run(self, scenario: Scenario) -> ScenarioResult: ...

    def run_batch(self, scenarios: Iterable[Scenario], jobs: int) -> Iterable[ScenarioResult]: ...

    def release(self, result: ScenarioResult) -> None:
        """`result` passed every check: the runner need not hold it for the report."""


def scenario_jobs(device: object) -> int:
    """How many orderings to run at once on `device`: its `scenario_jobs` (the simulator's is
    --scenario-jobs, one per CPU by default; adb devices run one at a time, since their run
    directories and pushes are per device)."""
    return max(1, int(getattr(device, "scenario_jobs", 1)))


def explore(run: Runner, name: str, plans: list[ModulePlan], orderings: list[list[Op]],
            shrink_budget: int = 40, jobs: int = 1) -> Exploration:
    """Run every ordering (`jobs` at a time, each in its own process, results taken and
    recorded in order); shrink the first failure of each kind."""
    failures: list[Failure] = []
    shrunk: set[str] = set()
    scenarios = (to_scenario(f"{name}_{i}", plans, ops) for i, ops in enumerate(orderings))
    messages = []
    for result in run.run_batch(scenarios, jobs):
        messages.append(check(result))
        if messages[-1] is None:
            run.release(result)
    for i, (ops, message) in enumerate(zip(orderings, messages)):
        if message is None:
            continue
        kind = signature(message)
        if kind in shrunk:
            failures.append(Failure(ops, message, ops, message))
            continue
        shrunk.add(kind)
        minimal, minimal_message = shrink(run, f"{name}_{i}", plans, ops, kind, message, shrink_budget)
        failures.append(Failure(ops, message, minimal, minimal_message))
    return Exploration(len(orderings), failures)


def shrink(run: Runner, name: str, plans: list[ModulePlan], ops: list[Op], kind: str,
           message: str, budget: int) -> tuple[list[Op], str]:
    """Greedily drop operations (or whole modules) while the run still fails the same way."""
    current, current_message = ops, message
    tries = 0
    improved = True
    while improved and tries < budget:
        improved = False
        candidates = [[o for o in current if o[1] != m] for m in dict.fromkeys(o[1] for o in current)]
        candidates += [current[:i] + current[i + 1:] for i in range(len(current))
                       if current[i][0] not in ("load_module", "destroy_module")]
        for candidate in candidates:
            if tries >= budget:
                break
            if not candidate or not _valid(plans, candidate):
                continue
            tries += 1
            got = check(run.run(to_scenario(f"{name}_shrink{tries}", plans, candidate)))
            if got is not None and signature(got) == kind:
                current, current_message, improved = candidate, got, True
                break
    return current, current_message


def _valid(plans: list[ModulePlan], ops: list[Op]) -> bool:
    sc = to_scenario("check", plans, ops)
    return all(e.step_ok for e in predict(sc))
