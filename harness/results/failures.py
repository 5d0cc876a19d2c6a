"""What went wrong in a run, as a list of failures in the order they happened.

A verdict depends on it: a known issue may only excuse a test when every failure of the run is
that issue (see harness.results.known_issues), so a wrong output before the known error, or a crash
after it, is never hidden behind an xfail. Each failure carries its kind and the failing step's
own words (the runner's message and the runtime's log lines written during that step).

Kinds: "error" (a step returned an error), "mismatch" (outputs differ from the reference, or
from another execute of the same method on the same input), "crash" (killed by a signal),
"timeout" (hung, killed), "incomplete" (exited without its end event), "refused" (the runner
would not run the scenario), "protocol" (the runner wrote an event the runner protocol does
not allow: a runner defect, never a known runtime issue), "check" (a harness check over a finished run: isolation, live
counts, memory, compile facts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Literal, get_args

from harness.results.run import ScenarioResult, StepResult, log_tail
from harness.scenario import Step

FailureKind = Literal["error", "mismatch", "crash", "timeout", "incomplete", "refused", "protocol",
                      "check"]
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

    `str()` is the full report for the person reading it; `failure` the structured part."""

    def __init__(self, report: str, failure: Failure) -> None:
        super().__init__(report)
        self.failure = failure


def _step_words(result: ScenarioResult, index: int, head: str) -> str:
    step = result.steps[index]
    lines = [head] if head else []
    if step.log.strip():
        lines.append(step.log.strip())
    return "\n".join(lines)


def run_failures(result: ScenarioResult) -> list[Failure]:
    """Every runtime failure of one run, in step order: steps that were not ok (except those the
    scenario expects to fail), executes whose outputs disagree with an earlier execute of the
    same method on the same inputs, and how the run ended if it did not finish."""
    name = result.scenario.name
    out: list[Failure] = []
    for i, s in enumerate(result.steps):
        if s.event is None:
            continue
        status = s.status
        if status == "error" and i not in result.scenario.allowed_errors:
            message = s.event.get("message") or f"error code {s.event.get('error_code')}"
            out.append(Failure("error", _step_words(result, i, message), name, i, s.step.describe()))
        elif status == "mismatch":
            head = (f"outputs differ from the reference beyond tolerance (max abs diff "
                    f"{s.event.get('max_abs_diff')})")
            out.append(Failure("mismatch", _step_words(result, i, head), name, i, s.step.describe()))
        elif status not in ("ok", "error"):
            out.append(Failure("error", _step_words(result, i, f"status {status}"), name, i,
                               s.step.describe()))
    out += inconsistent_outputs(result)
    out.sort(key=lambda f: -1 if f.step is None else f.step)
    kind = result.failure_kind
    if kind is not None:
        nxt = next((j for j, s in enumerate(result.steps) if s.event is None), None)
        words = result.crash_headline()
        logs = "\n".join(log_tail(text, 20) for text in result.output.logs.values())
        if nxt is not None:
            words = _step_words(result, nxt, words)
            where = result.steps[nxt].step.describe()
        else:
            where = "teardown"
            words += "\n" + log_tail(result.output.stderr, 20)
        out.append(Failure(kind, words + ("\n" + logs if logs else ""), name, nxt, where))
    out += [Failure("protocol", f"the runner broke the runner protocol: {error}", name)
            for error in result.protocol_errors]
    return out


def inconsistent_outputs(result: ScenarioResult) -> list[Failure]:
    """Ok executes whose outputs differ from the first ok execute of the same program's method
    (same inputs: the scenario's reference inputs), in step order."""
    out: list[Failure] = []
    first: dict[tuple[str, str], tuple[int, list[Any]]] = {}
    for i, s in enumerate(result.steps):
        if s.event is None:
            continue
        for sub, ev in _executes(s):
            model = result.scenario.models.get(sub.module or "")
            if model is None or ev.get("status") != "ok":
                continue
            key = (str(model.pte), sub.method or "")
            digests = [o.get("sha256") for o in ev.get("outputs") or []]
            if key in first and first[key][1] != digests:
                head = (f"outputs differ from step {first[key][0]}'s execute of the same "
                        "program's method on the same inputs")
                out.append(Failure("mismatch", _step_words(result, i, head), result.scenario.name,
                                   i, sub.describe()))
            first.setdefault(key, (i, digests))
    return out


def _executes(step_result: StepResult) -> Iterator[tuple[Step, dict[str, Any]]]:
    """(step, its event) of every execute in a reported step, its sub-steps' too."""
    event = step_result.event or {}
    if step_result.step.op == "execute":
        yield step_result.step, event
    for sub, ev in zip(step_result.step.substeps, event.get("substeps") or []):
        if sub.op == "execute":
            yield sub, ev


def failure_of(exc: BaseException) -> Failure:
    """The structured failure an exception stands for; a plain assertion is a "check"."""
    if isinstance(exc, HilFailure):
        return exc.failure
    return Failure("check", str(exc))
