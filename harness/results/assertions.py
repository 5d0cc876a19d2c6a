"""Assertions over a ScenarioResult: completion, step status, outputs, isolation, counts, memory.

Each raises AssertionError with the evidence a runtime engineer needs: the step, the runtime's
own message and log lines, and the QNN trace facts behind the verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from harness.programs.compile import uses_qnn
from harness.qnn.dsp_heap import error_name
from harness.results.failures import (Failure, HilFailure, inconsistent_outputs, run_failures,
                                      undefined_references, zero_start_words)
from harness.scenario.reference import predict
from harness.results.run import ScenarioResult
from harness.results.soak import SoakFit
from harness.scenario import Step

_RUNTIME_ERROR_LINE = re.compile(r"error|fail|deleted|abort|invalid", re.IGNORECASE)


P = ParamSpec("P")
R = TypeVar("R")
Assertion = Callable[Concatenate[ScenarioResult, P], R]


def _check(name: str) -> Callable[[Assertion[P, R]], Assertion[P, R]]:
    """Record on the result that a test made this check (`ScenarioResult.checks`)."""
    def wrap(assertion: Assertion[P, R]) -> Assertion[P, R]:
        @functools.wraps(assertion)
        def checked(result: ScenarioResult, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if name not in result.checks:
                result.checks.append(name)
            return assertion(result, *args, **kwargs)
        return checked
    return wrap


def assert_completed(result: ScenarioResult) -> None:
    """The runner neither crashed nor hung, and accepted the scenario."""
    kind = result.failure_kind
    if kind is not None:
        ended = [f for f in run_failures(result) if f.kind == kind]
        raise HilFailure(f"scenario {result.scenario.name}: {result.crash_report()}",
                         ended[-1] if ended else Failure(kind, result.crash_headline(),
                                                         result.scenario.name))


def assert_no_memory_errors(result: ScenarioResult) -> None:
    """valgrind (--valgrind) reported nothing of the run: no invalid access, uninitialised
    value, definite leak or data race outside the project's suppressions."""
    found = [f for f in run_failures(result) if f.kind == "memory"]
    if found:
        lines = "\n".join(f"  {f.describe()}" for f in found)
        first = "\n    ".join(found[0].message.splitlines()[1:40])
        raise HilFailure(f"scenario {result.scenario.name}: valgrind reported {len(found)} "
                         f"finding(s):\n{lines}\nfirst:\n    {first}", found[0])


def assert_nemesis(result: ScenarioResult) -> None:
    """The run made the interleavings and failures its scenario's nemesis rules state
    (harness.protocol.nemesis): no rendezvous timed out, and (in a finished run) every rule
    took effect. Otherwise the test's verdict would be about another run than the one written."""
    problems = [f for f in run_failures(result) if f.kind == "nemesis"]
    if problems:
        rules = "\n".join(f"    {r}" for r in result.scenario.qnn_nemesis)
        raise HilFailure(
            f"scenario {result.scenario.name}: the run did not follow its nemesis rules:\n"
            + "\n".join(f"  {f.message}" for f in problems)
            + f"\nrules:\n{rules}\nall steps:\n{result.summary()}", problems[0])


def unreachable(result: ScenarioResult) -> list[str]:
    """The run's forced rendezvous the runtime made impossible by ordering the calls itself
    (harness.protocol.nemesis.unreachable_rendezvous); not a failure: the test judges what ran."""
    from harness.protocol.nemesis import nemesis_events, unreachable_rendezvous

    return unreachable_rendezvous(result.scenario.qnn_nemesis, nemesis_events(result.trace))


def check_failed(result: ScenarioResult, report: str, words: str = "") -> HilFailure:
    """A failed harness check over a finished run (isolation, counts, memory)."""
    return HilFailure(report, Failure("check", words or report, result.scenario.name))


def runtime_log(result: ScenarioResult, limit: int = 12) -> str:
    """The runtime's own error lines from the runner's stderr."""
    lines = [l for l in result.output.stderr.splitlines()
             if _RUNTIME_ERROR_LINE.search(l) and not l.startswith("HARNESS_STEP ")]
    return "\n".join("    " + l for l in lines[-limit:])


@_check("steps")
def assert_steps_ok(result: ScenarioResult) -> None:
    """Every step succeeded; otherwise name the first failing step with the runtime's words."""
    assert_completed(result)
    bad = [(i, s) for i, s in enumerate(result.steps)
           if not s.ok and i not in result.scenario.allowed_errors]
    if bad:
        index, step = bad[0]
        failures = [f for f in run_failures(result) if f.step == index]
        failure = failures[0] if failures else Failure("error", step.describe(),
                                                        result.scenario.name, index)
        judged = (f"{failure.message.splitlines()[0]}\n"
                  if failure.kind == "mismatch" and failure.message else "")
        raise HilFailure(
            f"scenario {result.scenario.name}: step {index} {step.describe()}\n{judged}"
            f"runtime log:\n{runtime_log(result)}\nall steps:\n{result.summary()}", failure)
    # Steps ok, but outputs of a method with no usable reference were judged by nothing.
    unjudged = [] if result.scenario.outputs_judged_elsewhere else undefined_references(result)
    if unjudged:
        first = unjudged[0]
        raise HilFailure(f"scenario {result.scenario.name}: step {first.step} {first.where}: "
                         f"its outputs are not judged: {first.message}\nall steps:\n"
                         f"{result.summary()}", first)


def executed_outputs(result: ScenarioResult) -> list[tuple[int, Step, dict[str, Any]]]:
    """(step index, execute step, its event) for every ok execute, including the execute
    sub-steps of `parallel` steps (their event is the sub-step's entry in `substeps`)."""
    out = []
    for i, s in enumerate(result.steps):
        if s.event is None:
            continue
        if s.step.op == "execute" and s.ok:
            out.append((i, s.step, s.event))
        for sub, ev in zip(s.step.substeps, s.event.get("substeps") or []):
            if sub.op == "execute" and ev.get("status") == "ok":
                out.append((i, sub, ev))
    return out


@_check("outputs")
def assert_outputs_consistent(result: ScenarioResult) -> None:
    """Every execute of the same program's method gave identical outputs across modules."""
    assert_completed(result)
    differing = inconsistent_outputs(result)
    if differing:
        first = differing[0]
        raise HilFailure(f"scenario {result.scenario.name}: step {first.step} {first.where} "
                         f"gave different outputs: {first.message.splitlines()[0]}", first)


def state_divergences(result: ScenarioResult) -> list[str]:
    """Where two modules of one program disagree on the same-numbered execute of a stateful
    method since each loaded it (same inputs, same initial state, so the same outputs), as
    sentences with the values when the runner reported them. Independent of any reference: it
    sees modules that share or leak state even when every output is wrong."""
    import base64

    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    first: dict[tuple[str, str, int], tuple[str, int, list[Any], Any, dict[str, Any]]] = {}
    out: list[str] = []
    for i, (s, ordinals) in enumerate(zip(result.steps, result.scenario.ordinals())):
        if s.event is None:
            continue
        subs = [(s.step, s.event, ordinals[0])] if s.step.op == "execute" else [
            (sub, ev, nth) for sub, ev, nth in zip(s.step.substeps, s.event.get("substeps") or [],
                                                   ordinals) if sub.op == "execute"]
        for sub, ev, nth in subs:
            model = result.scenario.models.get(sub.module or "")
            ref = model.methods.get(sub.method or "") if model is not None else None
            if (ref is None or not ref.stateful or ref.undefined
                    or ev.get("status") not in ("ok", "mismatch")):
                continue  # an undefined one's outputs read uninitialised memory: no state
            key = (str(model.pte), sub.method or "", nth or 0)  # type: ignore[union-attr]
            outputs = ev.get("outputs") or []
            if key not in first:
                first[key] = (sub.module or "", i, outputs, sub, ev)
                continue
            other, j, before, other_sub, other_ev = first[key]
            if [o.get("sha256") for o in before] == [o.get("sha256") for o in outputs]:
                continue
            if _both_zero_start(result, (sub, nth, ev), (other_sub, nth, other_ev)):
                # Each is the method's output at this execute with its buffers started at
                # zero, but for elements of uninitialised memory (qnn-mutable-buffer-initial-
                # value's words are on the mismatches): the defined part went through the same
                # states, and garbage is not a state to compare.
                continue

            def shown(items: list[Any]) -> str:
                if items and "value" in items[0]:  # a non-tensor value
                    return repr(items[0]["value"])
                if not items or "data" not in items[0]:
                    return f"sha256 {str(items[0].get('sha256'))[:12]}" if items else "nothing"
                values = np.frombuffer(base64.b64decode(items[0]["data"]),
                                       dtype=numpy_dtype(items[0]["dtype"]))
                return np.array2string(values[:6], precision=4)

            if other == sub.module:
                why = (f"module {other} did not start from the same state after it was "
                       "loaded again")
            else:
                why = (f"modules {other} and {sub.module} do not each start from the program's "
                       "initial state and keep their own")
            out.append(f"step {i} {sub.describe()}: module {sub.module}'s execute {nth} of "
                       f"{sub.method} gave {shown(outputs)}, module {other}'s execute {nth} "
                       f"(step {j}) gave {shown(before)}: {why}")
    return out


def _both_zero_start(result: ScenarioResult, *executes: tuple[Any, int | None, dict[str, Any]]) -> bool:
    """Whether every (step, execute number, event) given is its method's output at that
    execute with its mutable buffers started at zero but for stray elements of uninitialised
    memory (the zero-start pattern of harness.results.failures)."""
    return all(_ZERO_START.match(zero_start_words(result, step, nth, ev))
               for step, nth, ev in executes)


_ZERO_START = re.compile(r"output \d+ is the method's output with its mutable buffers started at zero")


@_check("separate states")
def assert_separate_states(result: ScenarioResult) -> None:
    """Every module of a stateful program goes through the same states: the n-th execute of a
    method since a module loaded it gives what the n-th of any other module of the program
    gave (`state_divergences`)."""
    assert_completed(result)
    found = state_divergences(result)
    if found:
        raise check_failed(result, f"scenario {result.scenario.name}: " + "\n".join(found) +
                           f"\nall steps:\n{result.summary()}", "\n".join(found))


def context_owners(result: ScenarioResult) -> dict[str, str]:
    """Context identity -> module, by which module's step created it.

    A `parallel` step with sub-steps on several modules cannot say which of them created a
    context: its new contexts are owned by all of them jointly, written "A|B" (sorted module
    names joined by "|"; `owned_by` reads it). The isolation check then only counts: a group
    of modules that gained loaded methods in one parallel step must hold as many contexts as
    it has members, but which member holds which is not known.
    """
    owners: dict[str, str] = {}
    before: set[str] = set()
    for s in result.steps:
        now = set(s.trace["contexts"])
        modules = sorted(set(s.step.modules))
        for ctx in now - before:
            if modules:
                owners[ctx] = "|".join(modules)
        before = now
    return owners


def owned_by(owner: str | None, module: str) -> bool:
    """Whether `module` is (one of) the owner(s) `context_owners` recorded."""
    return owner is not None and module in owner.split("|")


def assert_traced(result: ScenarioResult) -> None:
    """A scenario that loads or executes a method of a QNN program has a QNN call trace;
    without one, counts would read zero. (Loading and destroying a module alone makes no QNN
    call: delegates start when a method loads.)"""
    qnn = {name for name, m in result.scenario.models.items() if uses_qnn(m.backend)}
    touched = any(sub.op in ("load_method", "execute") and sub.module in qnn
                  for step in result.scenario.steps for sub in step.flat)
    if touched and not any(r.kind == "api" for r in result.trace):
        raise check_failed(result,
            f"scenario {result.scenario.name}: no QNN call trace was recorded, so isolation and "
            "live counts cannot be checked: the harness's libQnnHtp.so interposer was not loaded "
            "(it is built for x86_64 hosts and stand-in devices; phones have no trace yet)")


@_check("isolation")
def assert_isolation(result: ScenarioResult) -> None:
    """Modules never share a context, executes use the executing module's context, a destroy
    frees only that module's contexts, and nothing runs on a freed context.

    For `parallel` steps (see `context_owners`) the checks are by group: the modules that
    gained a loaded QNN method in the step must have gained exactly as many live contexts, a
    destroy frees only contexts of the modules destroyed or unloaded in that step, and an
    execute runs only on contexts of the modules executing in that step.
    """
    assert_completed(result)
    assert_traced(result)
    name = result.scenario.name
    problems: list[str] = []
    violations = result.final_trace()["violations"]
    problems += [f"QNN trace: {v}" for v in violations]
    owners = context_owners(result)
    expected = predict(result.scenario)
    before: set[str] = set()
    holders_before: set[str] = set()
    executes_before: dict[str, int] = {}
    for i, (s, exp) in enumerate(zip(result.steps, expected)):
        now = set(s.trace["contexts"])
        holders = exp.context_holders()
        # A context owned jointly by a parallel step's modules serves one member that has no
        # context of its own; every such member needs one.
        shared = sorted(c for c in now if owners.get(c) and "|" in owners[c])
        for module in sorted(holders):
            if any(owners.get(c) == module for c in now):
                continue
            ctx = next((c for c in shared if owned_by(owners.get(c), module)), None)
            if ctx is not None:
                shared.remove(ctx)
            elif s.ok:
                others = sorted({owners.get(c, "?") for c in now})
                problems.append(
                    f"step {i} {s.step.describe()}: module {module} has loaded methods but owns no "
                    f"live QNN context (live contexts belong to {', '.join(others) or 'nobody'}): "
                    "it is using another module's cached context")
        if s.step.op == "parallel" and s.ok:
            gained = sorted((holders - holders_before) & set(s.step.modules))
            new = sorted(now - before)
            if len(new) != len(gained):
                problems.append(
                    f"step {i} {s.step.describe()}: {len(gained)} modules gained a loaded QNN "
                    f"method ({', '.join(gained) or 'none'}) but {len(new)} live QNN contexts are "
                    f"new ({', '.join(new) or 'none'})" +
                    (": it is using another module's cached context" if len(new) < len(gained)
                     else ": a context created in the step outlived it (a loser's candidate?)"))
        subs = s.step.flat
        destroyers = {x.module for x in subs
                      if x.op in ("destroy_module", "unload_method") and x.module is not None}
        if any(x.op == "destroy_module" for x in subs):
            freed = before - now
            foreign = sorted(c for c in freed
                             if not any(owned_by(owners.get(c), m) for m in destroyers))
            if foreign:
                problems.append(
                    f"step {i} {s.step.describe()}: destroying {', '.join(sorted(destroyers))} "
                    f"freed contexts of "
                    f"{', '.join(sorted({owners.get(c, '?') for c in foreign}))} ({', '.join(foreign)})")
        executors = {x.module for x in subs if x.op == "execute" and x.module is not None}
        if executors:
            for ctx, count in s.trace["executes"].items():
                if count > executes_before.get(ctx, 0) and not any(
                        owned_by(owners.get(ctx), m) for m in executors):
                    problems.append(
                        f"step {i} {s.step.describe()}: executed on {ctx}, which belongs to "
                        f"module {owners.get(ctx, '?')}")
        before = now
        holders_before = holders
        executes_before = dict(s.trace["executes"])
    if problems:
        raise check_failed(result, f"scenario {name}: handle isolation violated:\n  " +
                             "\n  ".join(dict.fromkeys(problems)) + f"\nsteps:\n{result.summary()}")


@_check("live counts")
def assert_live_counts(result: ScenarioResult) -> None:
    """Live QNN contexts after each step equal the reference model's; backends and devices
    exist exactly while a context does."""
    assert_completed(result)
    assert_traced(result)
    problems = []
    for i, (s, exp) in enumerate(zip(result.steps, predict(result.scenario))):
        live = s.live
        if live["context"] != exp.contexts:
            problems.append(f"step {i} {s.step.describe()}: {live['context']} live contexts, "
                            f"expected {exp.contexts}")
        for kind in ("backend", "device"):
            if (live[kind] == 0) != (exp.contexts == 0):
                problems.append(f"step {i} {s.step.describe()}: {live[kind]} live {kind}s with "
                                f"{exp.contexts} expected contexts")
    if problems:
        raise check_failed(result, f"scenario {result.scenario.name}: live QNN counts differ from the "
                             "reference model:\n  " + "\n  ".join(problems) +
                             f"\nruntime log:\n{runtime_log(result)}")


def memory_growth_kb(result: ScenarioResult, first: int, second: int, field: str = "Rss") -> int:
    assert_completed(result)
    a = result.steps[first].memory.get("rollup", {}).get(field)
    b = result.steps[second].memory.get("rollup", {}).get(field)
    if a is None or b is None:
        raise check_failed(result, f"scenario {result.scenario.name}: no {field} reading at steps "
                             f"{first} and {second}")
    return int(b - a)


@_check("memory")
def assert_memory_within(result: ScenarioResult, first: int, second: int, tolerance_kb: int,
                         field: str = "Rss") -> None:
    """Process memory at `second` is at most `tolerance_kb` above `first` (no leak)."""
    growth = memory_growth_kb(result, first, second, field)
    if growth > tolerance_kb:
        raise check_failed(result,
            f"scenario {result.scenario.name}: {field} grew {growth} kB between step {first} "
            f"({result.steps[first].step.describe()}) and step {second} "
            f"({result.steps[second].step.describe()}); tolerance {tolerance_kb} kB")


@_check("htp memory")
def assert_htp_memory_bounded(result: ScenarioResult, per_context_kb: int) -> None:
    """dma-buf memory (HTP shared and spill-fill buffers, from the runner's fdinfo readings)
    stays within `per_context_kb` per live QNN context above the first step's reading, and is
    back to that baseline whenever no context is live (nothing kept after a free)."""
    assert_completed(result)
    readings = [(i, s, s.memory.get("dmabuf", {}).get("bytes")) for i, s in enumerate(result.steps)]
    readings = [(i, s, b) for i, s, b in readings if b is not None]
    if not readings:
        raise check_failed(result, f"scenario {result.scenario.name}: no dma-buf readings in the events")
    baseline = readings[0][2]
    problems = []
    for i, s, total in readings:
        grown_kb = (total - baseline) // 1024
        contexts = s.live["context"]
        if grown_kb > contexts * per_context_kb:
            problems.append(f"step {i} {s.step.describe()}: dma-buf +{grown_kb} kB with {contexts} "
                            f"live contexts (allowed {per_context_kb} kB each)")
    if problems:
        raise check_failed(result, f"scenario {result.scenario.name}: HTP memory beyond the device "
                             "config's tolerance:\n  " + "\n  ".join(problems))


@_check("dsp heap")
def assert_dsp_heap_bounded(result: ScenarioResult, per_context_kb: int, leak_kb: int,
                            expected: bool) -> None:
    """DSP heap (QNN's own profile events at every context create and free, on phones) never
    exceeds `per_context_kb` per live context above its baseline, the reading before the run's
    first context, and is back within `leak_kb` of it whenever a free leaves no context live.

    `expected` says whether the device gives the reading (harness.qnn.dsp_heap.wanted); where it
    does not (the HTP simulator) there is nothing to check. Where it should, a library that
    refused the profiling, or contexts without any reading, fail: a missing reading must not
    read as a pass."""
    if not expected:
        return
    assert_completed(result)
    name = result.scenario.name
    state = result.trace_state
    if state.dsp_unsupported is not None:
        raise check_failed(result,
            f"scenario {name}: the device's libQnnHtp refused DSP memory profiling (error "
            f"{error_name(state.dsp_unsupported)}), so its DSP heap cannot be read; run with "
            "--dsp-heap off to go without the reading")
    if not state.dsp:
        if any(r.kind == "context_create" and r.rc == 0 for r in result.trace):
            raise check_failed(result,
                f"scenario {name}: QNN contexts were created but no DSP heap reading was traced "
                "(no DSP:... byte events in the profiles of QnnContext_createFromBinary and "
                "QnnContext_free)")
        return
    baseline = state.dsp[0].bytes
    problems = []
    for reading in state.dsp:
        grown_kb = (reading.bytes - baseline) / 1024
        step = result.step_at_offset(reading.offset)
        where = (f"step {step} {result.steps[step].step.describe()}" if step is not None
                 else "after the last reported step")
        # A "before ..._freed" figure still holds the context being freed.
        holding = reading.live_contexts + (reading.op == "free" and "before" in reading.event)
        if reading.op == "free" and "after" in reading.event and reading.live_contexts == 0:
            if grown_kb > leak_kb:
                problems.append(
                    f"{where}: {reading.event} {reading.bytes} bytes, {grown_kb:.0f} kB above the "
                    f"baseline ({baseline} bytes) with no live context (tolerance {leak_kb} kB): "
                    "freed contexts kept DSP heap")
        elif grown_kb > holding * per_context_kb:
            problems.append(
                f"{where}: {reading.event} +{grown_kb:.0f} kB with {holding} live contexts "
                f"(allowed {per_context_kb} kB each)")
    if problems:
        raise check_failed(result, f"scenario {name}: DSP heap beyond the device config's "
                           "bounds:\n  " + "\n  ".join(problems))


@_check("soak")
def assert_soak_bounded(result: ScenarioResult, rss_kb_per_cycle: float,
                        heap_bytes_per_cycle: float, warmup: int | None = None) -> SoakFit:
    """Growth per load/destroy cycle (harness.results.soak: Theil-Sen slopes over the cycles
    after `warmup`, default DEFAULT_WARMUP) within the device config's bounds, for Rss and for
    malloc's bytes in use. Decided on each slope's 95 % interval (soak.verdict): fails only
    when a whole interval is above its bound; a fit whose interval straddles its bound comes
    back with verdict UNDECIDED, for the caller to run more cycles (soak.soak_schedule). The
    fit, with its verdict, is kept on the result (results.json, JUnit properties)."""
    from harness.results.soak import DEFAULT_WARMUP, LEAK, soak_fit, soak_verdict, verdict

    fitted = soak_fit(result, DEFAULT_WARMUP if warmup is None else warmup)
    fitted = dataclasses.replace(fitted, verdict=soak_verdict(
        fitted.rss, fitted.heap, rss_kb_per_cycle, heap_bytes_per_cycle))
    result.soak = fitted.entry()
    over = [(what, slope, bound) for what, slope, bound in
            (("Rss", fitted.rss, rss_kb_per_cycle), ("malloc in use", fitted.heap,
                                                      heap_bytes_per_cycle))
            if slope is not None and verdict(slope, bound) == LEAK]
    if over:
        problems = [f"{what} grows {slope.describe()}, the whole interval above the bound "
                    f"of {bound:g} {slope.unit}/cycle" for what, slope, bound in over]
        words = "; ".join(f"{what} grows {slope.per_cycle:+.1f} {slope.unit}/cycle"
                          for what, slope, _ in over)
        raise check_failed(
            result, f"scenario {result.scenario.name}: memory grows with every load -> execute "
            f"-> destroy cycle, over {fitted.cycles - fitted.warmup} cycles after "
            f"{fitted.warmup} of warm-up:\n  " + "\n  ".join(problems) +
            "\nreadings after each cycle (Rss kB, malloc in use B):\n" + soak_table(result),
            f"memory grows per load/destroy cycle: {words}")
    return fitted


def soak_table(result: ScenarioResult) -> str:
    from harness.results.soak import cycle_steps

    rows = []
    for k, index in enumerate(cycle_steps(result)):
        memory = result.steps[index].memory
        rows.append(f"  cycle {k:>3} (step {index:>4}): {(memory.get('rollup') or {}).get('Rss')} "
                    f"{(memory.get('heap') or {}).get('in_use')}")
    return "\n".join(rows)
