"""Fault sweep: a scenario run once per QNN call site with that call made to fail.

`record` runs the scenario (with a reload of its first program appended: after any failure the
next load of the same program in the same process must work) and lists its QNN calls from the
interposer's trace: each `CallSite` is (QNN function, its occurrence in the process, the step
that made it). `inject` runs the scenario again with one site failing (a nemesis `fail` rule,
harness.protocol.nemesis: the interposer returns the code without calling QNN) and `judge`
says what went wrong, as failures a known issue may match:

- the run crashed, hung or did not finish (kind crash / timeout / incomplete);
- the step that made the failing call reported ok although the call it needed failed (check:
  "reported ok"), unless the runtime may go on without it (`TOLERATED`: the frees, the log);
- an execute reported ok with outputs other than the no-injection run's same execute
  (mismatch): the sweep runs its scenario with no reference (`unjudged`) and holds each
  injected run to the same scenario's run with nothing injected, so a program whose outputs
  are wrong anyway, or have no usable reference, still gets its failure-path verdicts;
- QNN handles still live once every module is destroyed (check: "QNN still holds handles"),
  not counting the one whose injected free never reached QNN;
- the reload after it did not work (error in a step after the scenario's own).

The scenario's own steps on the failing step's module, from that step on, may report errors
(they follow from the failure): they are the run's allowed errors; every other module's steps
must stay ok (other live modules keep working). Sites are sampled (`sample`) in CI and all run on
demand (`--fault-sweep`).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

from harness.programs.compile import CompiledModel
from harness.protocol.nemesis import fail_at
from harness.results.failures import Failure, run_failures
from harness.results.run import ScenarioResult
from harness.scenario import Scenario, Step

# QNN trace kinds -> the QNN function that wrote them (context_create: with binary= it was
# QnnContext_createFromBinary).
_TRACE_APIS = {
    "log_create": "QnnLog_create", "log_free": "QnnLog_free",
    "backend_create": "QnnBackend_create", "backend_free": "QnnBackend_free",
    "device_create": "QnnDevice_create", "device_free": "QnnDevice_free",
    "context_free": "QnnContext_free", "graph_create": "QnnGraph_create",
    "graph_retrieve": "QnnGraph_retrieve", "graph_execute": "QnnGraph_execute",
    "mem_register": "QnnMem_register", "mem_deregister": "QnnMem_deregister",
}
FREES = ("QnnLog_free", "QnnBackend_free", "QnnDevice_free", "QnnContext_free",
         "QnnMem_deregister", "QnnSystemContext_free")
# Calls whose failure the runtime may go on from, the step reporting ok: the frees (nothing to
# report them to), and the log handle (ExecuTorch warns "Failed to create log_handle for
# backend" and creates the backend without one: backends/qualcomm/runtime/backends/
# QnnLogger.cpp). The other checks still apply.
TOLERATED = (*FREES, "QnnLog_create")
FREE_KIND = {"QnnBackend_free": "backend", "QnnDevice_free": "device", "QnnContext_free": "context"}
# The error each function is made to fail with: the code its header gives for that failure.
ERRORS = {
    "QnnContext_createFromBinary": "QNN_CONTEXT_ERROR_CREATE_FROM_BINARY",
    "QnnContext_create": "QNN_COMMON_ERROR_MEM_ALLOC",
    "QnnGraph_retrieve": "QNN_GRAPH_ERROR_INVALID_HANDLE",
    "QnnGraph_execute": "QNN_GRAPH_ERROR_INVALID_HANDLE",
    "QnnMem_register": "QNN_COMMON_ERROR_MEM_ALLOC",
    "QnnLog_create": "QNN_COMMON_ERROR_MEM_ALLOC",
    "QnnBackend_create": "QNN_COMMON_ERROR_MEM_ALLOC",
    "QnnDevice_create": "QNN_COMMON_ERROR_MEM_ALLOC",
}
DEFAULT_ERROR = "QNN_COMMON_ERROR_GENERAL"  # also a dlopen's: the shim returns NULL whatever it says


@dataclasses.dataclass(frozen=True)
class CallSite:
    api: str
    n: int  # occurrence in the process, from 1
    step: int  # the step of the recorded run that made the call

    def describe(self) -> str:
        return f"{self.api}#{self.n} (step {self.step})"


def with_reload(scenario: Scenario, model: CompiledModel, method: str) -> Scenario:
    """`scenario` followed by a new module of `model`: load `method`, execute, destroy, and a
    snapshot (where nothing may be live)."""
    sc = copy.deepcopy(scenario)
    sc.name = f"{scenario.name}_sweep"
    sc.load_module("R", model).load_method("R", method).execute("R", method).label("reload")
    return sc.destroy_module("R").snapshot()


def call_sites(result: ScenarioResult, base_steps: int) -> list[CallSite]:
    """Every QNN call the recorded run made during its first `base_steps` steps, in order."""
    counts: dict[str, int] = {}
    sites = []
    for rec in result.trace:
        api = _TRACE_APIS.get(rec.kind)
        if rec.kind == "api":  # one line per QnnInterface_getProviders that returned a table
            api = "QnnInterface_getProviders"
        if rec.kind == "call":  # every other entry of the function table (interposer.c)
            api = rec.fields.get("api")
        if rec.kind == "dlopen" and "after_probe" not in rec.fields:
            # the runtime opening a QNN library (the dlopen shim); the open after a probe that
            # found it not loaded is the same attempt
            api = f"dlopen.{rec.fields.get('lib')}"
        if rec.kind == "context_create":
            api = "QnnContext_createFromBinary" if "binary" in rec.fields else "QnnContext_create"
        if api is None:
            continue
        counts[api] = counts.get(api, 0) + 1
        step = result.step_at_offset(rec.offset)
        if step is not None and step < base_steps:
            sites.append(CallSite(api, counts[api], step))
    return sites


def sample(sites: list[CallSite], limit: int, seed: int = 0) -> list[CallSite]:
    """At most `limit` sites: the first call of each function first, then a seeded draw."""
    if limit <= 0 or len(sites) <= limit:
        return list(sites)
    firsts = [s for s in sites if s.n == 1][:limit]
    rest = [s for s in sites if s not in firsts]
    chosen = firsts + random.Random(seed).sample(rest, max(0, limit - len(firsts)))
    return sorted(chosen, key=sites.index)


def baseline_errors(result: ScenarioResult) -> set[int]:
    """The steps of a completed no-injection run that reported an error (a known runtime bug
    the scenario meets, as S1 and S3 do on 1.5.1: `injected` allows them); a run that did not
    complete is no baseline (AssertionError)."""
    assert result.completed, f"the no-injection run did not complete:\n{result.summary()}"
    return {i for i, s in enumerate(result.steps) if not s.ok}


def injected(scenario: Scenario, site: CallSite, base_steps: int,
             baseline_failing: set[int] | frozenset[int] = frozenset()) -> Scenario:
    """`scenario` (with its reload) with `site` failing; its own steps from the failing one on
    may report errors, and so may the steps that failed with nothing injected
    (`baseline_errors`)."""
    sc = copy.deepcopy(scenario)
    sc.name = f"{scenario.name}_{site.api.lower()}_{site.n}"
    sc.nemesis(fail_at(site.api, site.n, ERRORS.get(site.api, DEFAULT_ERROR)))
    if sc.steps[site.step].op == "execute":
        sc.failed_executes.add(site.step)  # a failed execute must leave the state as it was
    failing = set(sc.steps[site.step].modules)
    sc.allowed_errors |= {i for i in range(site.step, base_steps)
                          if failing & set(sc.steps[i].modules)}
    sc.allowed_errors |= set(baseline_failing)
    return sc


def unjudged(model: CompiledModel) -> CompiledModel:
    """`model` with no expected outputs, so a sweep's runs report their outputs' bytes
    without judging them: `judge` holds each injected run's outputs to its no-injection
    run's, not to a reference (a program whose outputs are wrong anyway, or have no usable
    reference, still gets its failure-path verdicts). Stateful methods stay stateful (their
    executes are counted from each load)."""
    methods = {name: dataclasses.replace(ref, expected=(), sequence=(), variants=(),
                                         zero_start=(), undefined="", uninitialised="")
               for name, ref in model.methods.items()}
    return dataclasses.replace(model, methods=methods)


def judged_against_baseline(scenario: Scenario) -> Scenario:
    """`scenario` (of `unjudged` models) marked so that its run, and its injected copies'
    runs, leave their outputs to `judge` (Scenario.outputs_judged_elsewhere)."""
    scenario.outputs_judged_elsewhere = True
    return scenario


def unjudged_methods(model: CompiledModel) -> frozenset[tuple[str, str]]:
    """(program, method) of `model`'s methods whose executes read uninitialised memory (their
    solo run, made twice, differed): their bytes differ from run to run, so `judge` compares
    none."""
    return frozenset((str(model.pte), name) for name, ref in model.methods.items()
                     if ref.uninitialised or ref.undefined)


def _output_key(result: ScenarioResult, step: Step, nth: int | None) -> tuple[str, str, int, str]:
    model = result.scenario.models.get(step.module or "")
    ref = model.methods.get(step.method or "") if model is not None else None
    stateful = ref is not None and ref.stateful
    return (str(model.pte) if model is not None else "", step.method or "",
            (nth or 0) if stateful else 0, repr((step.variant, step.args.get("inputs"))))


def _executes(result: ScenarioResult) -> list[tuple[int, Step, dict[str, Any], int | None]]:
    """(step index, execute, its event, its number since the load) of every reported execute."""
    out = []
    for i, (s, ordinals) in enumerate(zip(result.steps, result.scenario.ordinals())):
        if s.event is None:
            continue
        events = [s.event] if s.step.op != "parallel" else list(s.event.get("substeps") or [])
        for k, (sub, ev) in enumerate(zip(s.step.flat, events)):
            if sub.op == "execute" and ev:
                out.append((i, sub, ev, ordinals[k] if k < len(ordinals) else None))
    return out


def output_changes(result: ScenarioResult, baseline: ScenarioResult,
                   skip: frozenset[tuple[str, str]] = frozenset()) -> list[Failure]:
    """Executes of the injected run `result` that reported ok with outputs other than the
    no-injection run's same execute (same program, method, input set and, for a stateful
    method, number since the load: a failed execute leaves the state as it was), except
    those of `skip` (unjudged_methods)."""
    before: dict[tuple[str, str, int, str], list[Any]] = {}
    for _, sub, ev, nth in _executes(baseline):
        if ev.get("status") == "ok":
            before.setdefault(_output_key(baseline, sub, nth),
                              [o.get("sha256") for o in ev.get("outputs") or []])
    out = []
    for i, sub, ev, nth in _executes(result):
        key = _output_key(result, sub, nth)
        if ev.get("status") != "ok" or key[:2] in skip or key not in before:
            continue
        got = [o.get("sha256") for o in ev.get("outputs") or []]
        if got != before[key]:
            out.append(Failure("mismatch", f"outputs differ from the no-injection run's same "
                               f"execute of {sub.method}" + (f" (execute {nth} since its "
                               "module loaded it)" if key[2] else ""), result.scenario.name,
                               i, sub.describe()))
    return out


def judge(result: ScenarioResult, site: CallSite, baseline: ScenarioResult | None = None,
          skip: frozenset[tuple[str, str]] = frozenset()) -> list[Failure]:
    """What went wrong in `result`, a run with `site` failing (module docstring); with the
    no-injection run `baseline`, outputs that differ from its (`output_changes`)."""
    name = result.scenario.name
    out = run_failures(result)
    if baseline is not None:
        out += output_changes(result, baseline, skip)
        out.sort(key=lambda f: -1 if f.step is None else f.step)
    if not result.completed:
        return out
    step = result.steps[site.step]
    if site.api not in TOLERATED and step.ok:
        out.append(Failure("check", f"{site.api} #{site.n} failed with an injected error but "
                           f"step {site.step} {step.step.describe()} reported ok", name,
                           site.step, step.step.describe()))
    live = dict(result.last.live)
    if site.api in FREE_KIND:
        kind = FREE_KIND[site.api]
        live[kind] = max(0, live[kind] - 1)  # the handle whose free never reached QNN
    if any(live.values()):
        out.append(Failure("check", f"QNN still holds handles once every module is destroyed "
                           f"(live {live}) after {site.api} #{site.n} failed in step "
                           f"{site.step} {step.step.describe()}", name))
    return out
