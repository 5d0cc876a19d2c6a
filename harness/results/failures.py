"""What went wrong in a run, as a list of failures in the order they happened.

A verdict depends on it: a known issue may only excuse a test when every failure of the run is
that issue (see harness.results.known_issues), so a wrong output before the known error, or a crash
after it, is never hidden behind an xfail. Each failure carries its kind and the failing step's
own words (the runner's message and the runtime's log lines written during that step).

Kinds: "error" (a step returned an error), "mismatch" (outputs differ from the reference, or
from another execute of the same method on the same input), "crash" (killed by a signal),
"timeout" (hung, killed), "incomplete" (exited without its end event), "refused" (the runner
would not run the scenario), "protocol" (the runner wrote an event the runner protocol does
not allow: a runner defect, never a known runtime issue), "nemesis" (the run did not make the
interleaving or the QNN failure its scenario's nemesis rules state: a rendezvous timed out, or
a rule never took effect; never a known runtime issue either), "check" (a harness check over a
finished run: isolation, live counts, memory, compile facts), "memory" (valgrind, under
--valgrind, reported a memory error, a definite leak or a data race: harness.results.valgrind).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args

from harness.errors import HarnessError
from harness.protocol.nemesis import nemesis_events, nemesis_problems
from harness.protocol.scenario_file import VALUE_KINDS
from harness.protocol.values import read_value
from harness.protocol.values import shown as values_shown
from harness.results.crash_site import crash_site_line, without_crash_report
from harness.results.run import ScenarioResult, StepResult, log_tail
from harness.results.valgrind import Finding
from harness.scenario import Step

FailureKind = Literal["error", "mismatch", "crash", "timeout", "incomplete", "refused", "protocol",
                      "nemesis", "check", "memory"]
KINDS: tuple[str, ...] = get_args(FailureKind)
RUNTIME_KINDS = tuple(k for k in KINDS if k != "check")


@dataclasses.dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str  # what a known issue's `match` is searched in
    scenario: str = ""
    step: int | None = None
    where: str = ""  # the step, described

    def describe(self) -> str:
        at = f" step {self.step} {self.where}" if self.step is not None else ""
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        scenario = f"scenario {self.scenario}" if self.scenario else "test"
        return f"{self.kind} in {scenario}{at}: {first}"


class HilFailure(AssertionError):
    """An assertion failure that knows its kind and the words a known issue matches on.

    `str()` is the full report for the person reading it; `failure` the structured part.
    `parts`: the separate findings a test reports as one failure (a fault sweep's sites, a
    heap that grows and handles left), each of which a known issue must explain on its own:
    one entry's words in one finding never excuse another finding beside it."""

    def __init__(self, report: str, failure: Failure, parts: list[Failure] | None = None) -> None:
        super().__init__(report)
        self.failure = failure
        self.parts = list(parts or [])


def _step_words(result: ScenarioResult, index: int, head: str) -> str:
    step = result.steps[index]
    lines = [head] if head else []
    log = without_crash_report(step.log).strip()
    if log:
        lines.append(log)
    return "\n".join(lines)


def run_failures(result: ScenarioResult) -> list[Failure]:
    """Every runtime failure of one run, in step order: steps that were not ok (except those the
    scenario expects to fail), executes whose outputs disagree with an earlier execute of the
    same method on the same inputs, and how the run ended if it did not finish."""
    name = result.scenario.name
    out: list[Failure] = []
    ordinals = result.scenario.ordinals()
    for i, s in enumerate(result.steps):
        if s.event is None:
            continue
        status = s.status
        if status == "error" and i not in result.scenario.allowed_errors:
            message = s.event.get("message") or f"error code {s.event.get('error_code')}"
            out.append(Failure("error", _step_words(result, i, message), name, i, s.step.describe()))
        elif status == "mismatch":
            head = (f"outputs differ from the reference beyond tolerance (max abs diff "
                    f"{s.event.get('max_abs_diff')}); {mismatch_detail(result, i, ordinals[i])}")
            out.append(Failure("mismatch", _step_words(result, i, head), name, i, s.step.describe()))
        elif status not in ("ok", "error"):
            out.append(Failure("error", _step_words(result, i, f"status {status}"), name, i,
                               s.step.describe()))
    if not result.scenario.outputs_judged_elsewhere:
        out += inconsistent_outputs(result)
        out += undefined_references(result)
    out.sort(key=lambda f: -1 if f.step is None else f.step)
    kind = result.failure_kind
    if kind is not None:
        nxt = next((j for j, s in enumerate(result.steps) if s.event is None), None)
        words = result.crash_headline()
        if kind == "crash":
            words += "\n" + crash_site_line(result.output.stderr)
        logs = "\n".join(log_tail(text, 20) for text in result.output.logs.values())
        if nxt is not None:
            words = _step_words(result, nxt, words)
            where = result.steps[nxt].step.describe()
        else:
            where = "teardown"
            words += "\n" + log_tail(without_crash_report(result.output.stderr), 20)
        out.append(Failure(kind, words + ("\n" + logs if logs else ""), name, nxt, where))
    out += [Failure("protocol", f"the runner broke the runner protocol: {error}", name)
            for error in result.protocol_errors]
    out += [Failure("nemesis", problem, name) for problem in
            nemesis_problems(result.scenario.qnn_nemesis, nemesis_events(result.trace),
                             finished=result.completed)]
    return out + memory_failures(result)


def memory_failures(result: ScenarioResult) -> list[Failure]:
    """valgrind's findings of the run (--valgrind) as failures, each at the step its stack
    says: errors come in the order they happened, so each goes to the next step (from the
    last one placed) of the op whose runner function is on its stack; a leak (reported at
    exit, its stack the allocation's) to the only step of that op. Else the run's."""
    findings = result.memory_findings
    if not findings:
        return []
    steps = result.scenario.steps
    xml = f"\nvalgrind report: {result.artifacts / 'valgrind.xml'}" if result.artifacts else ""
    out: list[Failure] = []
    cursor = 0
    for finding in findings:
        op = finding.runner_op()
        of_op = [i for i, s in enumerate(steps)
                 if op and (s.op == op or any(sub.op == op for sub in s.substeps))]
        index: int | None = None
        if finding.kind.startswith("Leak_"):
            index = of_op[0] if len(of_op) == 1 else None
        else:
            index = next((i for i in of_op if i >= cursor), None)
            cursor = index if index is not None else cursor
        where = steps[index].describe() if index is not None else "the run"
        out.append(Failure("memory", finding.signature() + "\n" + _finding_words(finding) + xml,
                           result.scenario.name, index, where))
    return out


def _finding_words(finding: Finding) -> str:
    """valgrind's words and stacks, as its own text report lays them out."""
    lines = [finding.what] + [f"    at {f.describe()}" for f in finding.stack]
    for words, stack in finding.aux:
        lines += [f"  {words}"] + [f"    at {f.describe()}" for f in stack]
    return "\n".join(lines)


def reference_words(result: ScenarioResult, step: Step, ordinal: int | None) -> str:
    """Which reference an execute was judged against, in words for a failure message."""
    model = result.scenario.models.get(step.module or "")
    if model is None:
        return "reference: unknown"
    ref = model.methods.get(step.method or "")
    if ref is not None and ref.stateful:
        return (f"reference: {model.reference}, carrying the state: execute {ordinal} of "
                f"{step.method} since module {step.module} loaded it")
    return f"reference: {model.reference}"


def mismatch_detail(result: ScenarioResult, index: int, ordinals: tuple[int | None, ...]) -> str:
    """The reference used and, where the runner reported the outputs' bytes, the values."""
    s = result.steps[index]
    parts = []
    for k, sub, ev in _executes(s):
        if ev.get("status") != "mismatch":
            continue
        nth = ordinals[k] if k < len(ordinals) else None
        words = reference_words(result, sub, nth)
        values = _values(result, sub, nth, ev)
        pattern = (_same_bytes_as_another(s, sub, ev) or zero_start_words(result, sub, nth, ev)
                   or carried_state_words(result, index, sub, nth, ev)
                   or uninitialised_words(result, sub, nth, ev))
        parts.append(words + (f"; {values}" if values else "") +
                     (f"; pattern: {pattern}" if pattern else ""))
    return "; ".join(parts) or reference_words(result, s.step, ordinals[0] if ordinals else None)


def _values(result: ScenarioResult, step: Step, ordinal: int | None, event: dict[str, Any],
            shown: int = 6) -> str:
    """"output 0 got [..] expected [..]" for the first differing output whose bytes the runner
    reported (`emit_outputs`); "" when it did not."""
    import base64

    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    try:
        expected = result.scenario.expected_for(step, ordinal)
    except HarnessError:
        return ""
    for j, (out, ref) in enumerate(zip(event.get("outputs") or [], expected)):
        if ref.dtype in VALUE_KINDS or "value" in out:  # a non-tensor value: compared whole
            try:
                value = read_value(ref.dtype, ref.shape, Path(ref.file).read_bytes())
            except (OSError, ValueError):
                continue
            got_kind = str(out.get("dtype"))
            if got_kind != ref.dtype or out.get("value") != value:
                said = (values_shown(got_kind, out.get("value")) if got_kind in VALUE_KINDS
                        else f"a {got_kind} tensor")
                return f"output {j} got {said}, expected {values_shown(ref.dtype, value)}"
            continue
        if "data" not in out or out.get("dtype") != ref.dtype:
            continue
        try:
            got = np.frombuffer(base64.b64decode(out["data"]), dtype=numpy_dtype(out["dtype"]))
            want = np.fromfile(ref.file, dtype=numpy_dtype(ref.dtype))
        except (OSError, ValueError, TypeError):
            continue
        if got.shape != want.shape or np.array_equal(got, want):
            continue
        return (f"output {j} got {np.array2string(got[:shown], precision=4)}, expected "
                f"{np.array2string(want[:shown], precision=4)} (first {min(shown, got.size)} of "
                f"{got.size})")
    return ""


def _same_bytes_as_another(step: StepResult, sub: Step, event: dict[str, Any]) -> str:
    """A wrong output that is byte for byte another module's *correct* output of the same
    parallel step (one sha256, and that execute matched its own reference): the signature of
    two executes sharing one set of output buffers. Two modules returning the same wrong bytes
    (both mismatches) are a wrong output, not this pattern."""
    digests = [o.get("sha256") for o in event.get("outputs") or []]
    if not digests or None in digests:
        return ""
    subs = step.step.substeps
    for other, ev in zip(subs, (step.event or {}).get("substeps") or []):
        if other is sub or other.module == sub.module or other.op != "execute":
            continue
        if ev.get("status") == "ok" and [o.get("sha256") for o in ev.get("outputs") or []] == digests:
            return (f"the outputs are byte-identical to module {other.module}'s execute of "
                    f"{other.method} in the same parallel step (sha256 {digests[0][:12]}...), "
                    "on other inputs")
    return ""


def zero_start_words(result: ScenarioResult, step: Step, ordinal: int | None,
                event: dict[str, Any]) -> str:
    """A stateful method's wrong output as a known pattern, but for a few elements of garbage:
    what the method gives with its mutable buffers started at zero (the initial value never
    loaded), or what another execute of the sequence gives (a state carried over from another
    module, or not reset by a reload). "" when the outputs' bytes or those references are not
    there, or the outputs are something else."""
    import base64

    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    model = result.scenario.models.get(step.module or "")
    if model is None:
        return ""
    ref = model.methods.get(step.method or "")
    if ref is None or not ref.zero_start or ordinal is None or not 1 <= ordinal <= len(ref.zero_start):
        return ""
    # (zeroed, execute number, expected outputs): the zero start at this execute first
    candidates = [(True, ordinal, ref.zero_start[ordinal - 1])]
    candidates += [(True, n + 1, outs) for n, outs in enumerate(ref.zero_start) if n + 1 != ordinal]
    candidates += [(False, n + 1, outs) for n, outs in enumerate(ref.sequence) if n + 1 != ordinal]
    for j, out in enumerate(event.get("outputs") or []):
        if "data" not in out:
            continue
        try:
            got = np.frombuffer(base64.b64decode(out["data"]), dtype=numpy_dtype(out["dtype"]))
        except (OSError, ValueError, TypeError):
            continue
        for zeroed, nth, outs in candidates:
            if j >= len(outs) or outs[j].dtype != out.get("dtype"):
                continue
            try:
                want = np.fromfile(outs[j].file, dtype=numpy_dtype(outs[j].dtype))
            except (OSError, ValueError, TypeError):
                continue
            garbage = _all_but_garbage(got, want, model.atol, model.rtol,
                                       ref.uninitialised_elements[j]
                                       if j < len(ref.uninitialised_elements) else ())
            if garbage is None:
                continue
            if nth == ordinal:
                return (f"output {j} is the method's output with its mutable buffers started "
                        f"at zero, not at their initial value{garbage}")
            start = "with its buffers started at zero" if zeroed else "from the initial value"
            return (f"output {j} is the method's output at its execute {nth} since a load "
                    f"({start}), not at execute {ordinal}: it carries a state it did not make"
                    f"{garbage}")
    return ""


def uninitialised_words(result: ScenarioResult, step: Step, ordinal: int | None,
                        event: dict[str, Any]) -> str:
    """A wrong output of a method whose solo runs read uninitialised memory
    (MethodReference.uninitialised), as that finding, when every element that differs from
    the reference is one the two heap fills showed uninitialised: those elements are undefined
    on this runtime, whatever they read (a running mean divided by a garbage count reads 0).
    "" otherwise, or without the outputs' bytes."""
    import base64

    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    model = result.scenario.models.get(step.module or "")
    ref = model.methods.get(step.method or "") if model is not None else None
    if model is None or ref is None or not ref.uninitialised or not ref.uninitialised_elements:
        return ""
    try:
        expected = result.scenario.expected_for(step, ordinal)
    except HarnessError:
        return ""
    shown = []
    for j, (out, want) in enumerate(zip(event.get("outputs") or [], expected)):
        if "data" not in out or out.get("dtype") != want.dtype:
            return ""
        try:
            got = np.frombuffer(base64.b64decode(out["data"]), dtype=numpy_dtype(out["dtype"]))
            ref_values = np.fromfile(want.file, dtype=numpy_dtype(want.dtype))
        except (OSError, ValueError, TypeError):
            return ""
        if got.shape != ref_values.shape:
            return ""
        other = np.flatnonzero(~np.isclose(got.astype(np.float64),
                                           ref_values.astype(np.float64),
                                           atol=model.atol, rtol=model.rtol))
        allowed = set(ref.uninitialised_elements[j]) if j < len(ref.uninitialised_elements) \
            else set()
        if not set(other.tolist()) <= allowed:
            return ""
        if other.size:
            shown.append(f"output {j}: {other.size} of {got.size}")
    if not shown:
        return ""
    return (f"{'; '.join(shown)} element(s) differ, all of them elements read from memory "
            f"nobody wrote: {ref.uninitialised}")


ZERO_START_WORDS = re.compile(r"output \d+ is the method's output with its mutable buffers "
                              r"started at zero")


def carried_state_words(result: ScenarioResult, index: int, step: Step, ordinal: int | None,
                        event: dict[str, Any]) -> str:
    """A stateful method's wrong output as a carried state (`carried_states`), "" for none."""
    del ordinal, event  # the run's own record says them
    if not any(ref.stateful for m in result.scenario.models.values() for ref in m.methods.values()):
        return ""
    found = result.__dict__.get("_carried_states")  # once a run: every mismatch asks
    if found is None or found[0] != len(result.steps):
        found = (len(result.steps), carried_states(result))
        result.__dict__["_carried_states"] = found
    return found[1].get((index, step.module or "", step.method or ""), "")


def carried_states(result: ScenarioResult) -> dict[tuple[int, str, str], str]:
    """Per wrong execute (step index, module, method) of a stateful method whose state was
    carried over, the pattern: it differs (in more than half of its elements, so not by
    stray uninitialised ones) from another execute of the same number since a load, on the
    same inputs, of the same program's method that was right (it matched the reference, or
    is the method's output from a zero start): another Module's, then the two share one
    state; this Module's own in another load, then it did not start over. Every other wrong
    execute of such a module, once the other had executed, follows that state. It names a
    state carried over where the inputs change from execute to execute
    (MethodReference.input_sequence), so the output is no execute of the reference's
    sequence. Needs the outputs' bytes (emit_outputs)."""
    import base64

    import numpy as np

    from harness.protocol.tensors import numpy_dtype

    def arrays(items: list[dict[str, Any]]) -> list[Any] | None:
        if not items or any("data" not in o for o in items):
            return None
        try:
            return [np.frombuffer(base64.b64decode(o["data"]),
                                  dtype=numpy_dtype(o["dtype"])).astype(np.float64)
                    for o in items]
        except (KeyError, ValueError, TypeError):
            return None

    ordinals = result.scenario.ordinals()
    # (step, execute, its ordinal, its program, its outputs) of every stateful execute
    right: list[tuple[int, Step, int, str, list[Any]]] = []
    wrong: list[tuple[int, Step, int, str, list[Any]]] = []
    loads: dict[int, int] = {}  # step -> how many loads of its module came before
    count: dict[str, int] = {}
    for i, s in enumerate(result.steps):
        for sub in s.step.flat:
            if sub.op == "load_module":
                count[sub.module or ""] = count.get(sub.module or "", 0) + 1
        loads[i] = 0
        if s.event is None:
            continue
        for k, sub, ev in _executes(s):
            model = result.scenario.models.get(sub.module or "")
            ref = model.methods.get(sub.method or "") if model is not None else None
            nth = ordinals[i][k] if k < len(ordinals[i]) else None
            got = arrays(ev.get("outputs") or [])
            if model is None or ref is None or not ref.stateful or nth is None or got is None:
                continue
            loads[i] = count.get(sub.module or "", 0)
            entry = (i, sub, nth, str(model.pte), got)
            if ev.get("status") == "ok" or (ev.get("status") == "mismatch" and ZERO_START_WORDS.match(
                    zero_start_words(result, sub, nth, ev))):
                right.append(entry)
            elif ev.get("status") == "mismatch":
                wrong.append(entry)
    out: dict[tuple[int, str, str], str] = {}
    # (program, module) -> (step, what it shows, the module it shares its state with)
    shown: dict[tuple[str, str], tuple[int, str, str]] = {}
    for i, sub, nth, program, got in wrong:
        module = sub.module or ""
        model = result.scenario.models[module]
        for j_step, other, _, _, theirs in sorted(
                (r for r in right if r[2] == nth and r[3] == program
                 and r[1].method == sub.method and r[1].variant == sub.variant
                 and len(r[4]) == len(got)
                 and (r[1].module != module or loads[r[0]] != loads[i])),
                key=lambda r: (r[0] > i, abs(r[0] - i))):  # the nearest earlier one first
            j = next((j for j, (a, b) in enumerate(zip(got, theirs))
                      if a.shape == b.shape and a.size and _all_but_garbage(
                          a, b, model.atol, model.rtol) is None), None)
            if j is None:
                continue
            if other.module == module:
                what = f"module {module} did not start from the same state after it was " \
                    "loaded again"
                out[(i, module, sub.method or "")] = (
                    f"output {j} differs from module {module}'s execute {nth} of {sub.method} "
                    f"on the same inputs in another load (step {j_step}): it did not start "
                    "from the same state after it was loaded again")
            else:
                what = f"modules {other.module} and {module} share one state"
                out[(i, module, sub.method or "")] = (
                    f"output {j} differs from module {other.module}'s execute {nth} of "
                    f"{sub.method} on the same inputs (step {j_step}), which was right: it "
                    f"carries a state it did not make ({what})")
                shown.setdefault((program, other.module or ""), (i, what, module))
            shown.setdefault((program, module), (i, what, other.module or ""))
            break
    # A wrong execute of a module shown to share its state, once the other module had
    # executed the method: that state is not its own.
    for i, sub, _, program, _ in wrong:
        module, method = sub.module or "", sub.method or ""
        if (i, module, method) in out or (program, module) not in shown:
            continue
        at, what, partner = shown[(program, module)]
        if partner == module or any(
                j < i and other.module == partner and other.method == method
                for j, s in enumerate(result.steps) for _, other, _ in _executes(s)):
            out[(i, module, method)] = f"output 0 is off while {what} (step {at} shows it)"
    return out


GARBAGE_FACTOR = 1000.0
"""How far beyond the largest expected element an uninitialised element must be for more than
half of an output's elements to be taken as garbage (fp16 garbage reads +-65504 or
+-131008)."""


def _all_but_garbage(got: Any, want: Any, atol: float, rtol: float,
                     uninitialised: tuple[int, ...] = ()) -> str | None:
    """None unless `got` is `want` but for at most half of its elements (uninitialised memory,
    any value: the delegated buffers' stray elements read -48.97 or +-131008, 5 of 16 after a
    reload in one CI run), or but for more of them that are all elements the program's two
    solo runs showed read from memory nobody wrote (`uninitialised`: MethodReference.
    uninitialised_elements) and all of a size no execute gives (GARBAGE_FACTOR times the
    largest expected; a delegated buffer left 11 of 16 elements at +-131008 in one S5 run);
    then the words for those."""
    import numpy as np

    if got.shape != want.shape or got.size == 0:
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    other = ~np.isclose(g, w, atol=atol, rtol=rtol)
    n_other = int(other.sum())
    if not n_other:
        return f" ({got.size} of {got.size} elements)"
    if n_other > max(1, got.size // 2) and (
            n_other == got.size
            or not set(np.flatnonzero(other).tolist()) <= set(uninitialised)
            or not (np.abs(g[other]) > GARBAGE_FACTOR * (np.abs(w).max() + atol)).all()):
        return None
    return (f" ({got.size - n_other} of {got.size} elements; {n_other} other element(s), up "
            f"to {float(np.abs(g[other]).max()):g} in magnitude: uninitialised memory)")


def undefined_references(result: ScenarioResult) -> list[Failure]:
    """Once per program's method that has no usable reference (MethodReference.undefined: its
    solo run read uninitialised memory) and that the run executed: a failure at its first
    execute saying so. Its outputs are judged by nothing else (no reference, no comparison
    between executes), so the runtime's correct outputs are never called wrong, and a run that
    executes such a method never passes as if they had been checked."""
    out: list[Failure] = []
    said: set[tuple[str, str]] = set()
    for i, s in enumerate(result.steps):
        if s.event is None:
            continue
        for _, sub, ev in _executes(s):
            model = result.scenario.models.get(sub.module or "")
            ref = model.methods.get(sub.method or "") if model is not None else None
            if ref is None or not ref.undefined or ev.get("status") not in ("ok", "mismatch"):
                continue
            key = (str(model.pte), sub.method or "")  # type: ignore[union-attr]
            if key in said:
                continue
            said.add(key)
            out.append(Failure("mismatch", f"pattern: {ref.undefined}", result.scenario.name, i,
                               sub.describe()))
    return out


def inconsistent_outputs(result: ScenarioResult) -> list[Failure]:
    """Ok executes whose outputs differ from the first ok execute of the same program's method
    on the same inputs (the reference inputs or the same variant), in step order. A stateful method's executes
    are held to the same-numbered execute since the load (its state differs between them)."""
    out: list[Failure] = []
    first: dict[tuple[str, str, int, tuple[int | str, str]], tuple[int, list[Any]]] = {}
    ordinals = result.scenario.ordinals()
    for i, s in enumerate(result.steps):
        if s.event is None:
            continue
        for k, sub, ev in _executes(s):
            model = result.scenario.models.get(sub.module or "")
            if model is None or ev.get("status") != "ok":
                continue
            ref = model.methods.get(sub.method or "")
            if ref is not None and ref.undefined:
                continue  # its outputs read uninitialised memory: undefined_references says so
            nth = (ordinals[i][k] or 0) if ref is not None and ref.stateful else 0
            # An execute on another input set (a variant; a replayed step's own input files)
            # is held only to executes on the same inputs.
            # A fed execute (a decode loop's step) takes an earlier execute's outputs as well.
            inputs = (sub.variant or repr(sub.args.get("inputs")),
                      repr(sub.args.get("feed")) if sub.args.get("feed") else "")
            key = (str(model.pte), sub.method or "", nth, inputs)
            digests = [o.get("sha256") for o in ev.get("outputs") or []]
            if key in first and first[key][1] != digests:
                head = (f"outputs differ from step {first[key][0]}'s execute of the same "
                        "program's method on the same inputs"
                        + (f" (both execute {nth} since their module loaded it)" if nth else ""))
                out.append(Failure("mismatch", _step_words(result, i, head), result.scenario.name,
                                   i, sub.describe()))
            first.setdefault(key, (i, digests))
    return out


def _executes(step_result: StepResult) -> Iterator[tuple[int, Step, dict[str, Any]]]:
    """(index among the step's flat sub-steps, step, its event) of every execute in a
    reported step, its sub-steps' too."""
    event = step_result.event or {}
    if step_result.step.op == "execute":
        yield 0, step_result.step, event
    for k, (sub, ev) in enumerate(zip(step_result.step.substeps, event.get("substeps") or [])):
        if sub.op == "execute":
            yield k, sub, ev


def failure_parts(exc: BaseException) -> list[Failure]:
    """The findings a known issue judges one by one: the exception's parts, else its failure."""
    parts = getattr(exc, "parts", None)
    return list(parts) if parts else [failure_of(exc)]


def failure_of(exc: BaseException) -> Failure:
    """The structured failure an exception stands for; a plain assertion is a "check"."""
    if isinstance(exc, HilFailure):
        return exc.failure
    return Failure("check", str(exc))
