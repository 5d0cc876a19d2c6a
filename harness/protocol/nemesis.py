"""Nemesis rules: held threads and injected failures at the QNN boundary, as scenario data.

A scenario's `qnn_nemesis` field lists rules the QNN interposer (harness/qnn/interposer.c)
applies in the runner process, so an interleaving or a failure is stated by the scenario, not
left to the machine's load, and `harness replay` runs the same one. Two kinds:

    fail [ACTOR:]API#N[+] rc=CODE
        the N-th call of API (by threads named ACTOR, else by any thread) returns CODE without
        calling the real function; `+`: that call and every later one.
    hold enter|leave [ACTOR:]API#N until enter|leave [ACTOR:]API#N [timeout_ms=T]
        the thread reaching the first point (entering the call, or leaving it once the real
        function returned) waits until a thread has reached the second, at most T ms (default
        10000); past that it goes on and the run fails ("rendezvous timed out"), never hangs.
        Each hold's timeout must be under the runner timeout (`check_hold_timeouts`).

API is a QNN function (`QNN_APIS`) or a runner step point (`step.load_method`, ...: the native
runner marks entering and leaving each step). An actor is a module's name: the native runner
names each thread after the module of the step it runs. Every rule that took effect is a trace
line (`nemesis_hold`, `nemesis_release`, `nemesis_timeout`, `nemesis_fail`, and
`nemesis_late` when the point a timed-out hold waited for came after it gave up);
`nemesis_problems` says which of a run's rules did not do what they say, and
`unreachable_rendezvous` which could not, because the runtime orders those calls itself.

Cheap to import: the standard library and `harness.errors` only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from harness.errors import HarnessError

QNN_TABLE = (
    "QnnProperty_hasCapability", "QnnBackend_create", "QnnBackend_setConfig",
    "QnnBackend_getApiVersion", "QnnBackend_getBuildId", "QnnBackend_registerOpPackage",
    "QnnBackend_getSupportedOperations", "QnnBackend_validateOpConfig", "QnnBackend_free",
    "QnnContext_create", "QnnContext_setConfig", "QnnContext_getBinarySize",
    "QnnContext_getBinary", "QnnContext_createFromBinary", "QnnContext_free",
    "QnnGraph_create", "QnnGraph_createSubgraph", "QnnGraph_setConfig", "QnnGraph_addNode",
    "QnnGraph_finalize", "QnnGraph_retrieve", "QnnGraph_execute", "QnnGraph_executeAsync",
    "QnnTensor_createContextTensor", "QnnTensor_createGraphTensor", "QnnLog_create",
    "QnnLog_setLogLevel", "QnnLog_free", "QnnProfile_create", "QnnProfile_setConfig",
    "QnnProfile_getEvents", "QnnProfile_getSubEvents", "QnnProfile_getEventData",
    "QnnProfile_getExtendedEventData", "QnnProfile_free", "QnnMem_register",
    "QnnMem_deregister", "QnnDevice_getPlatformInfo", "QnnDevice_freePlatformInfo",
    "QnnDevice_getInfrastructure", "QnnDevice_create", "QnnDevice_setConfig",
    "QnnDevice_getInfo", "QnnDevice_free", "QnnSignal_create", "QnnSignal_setConfig",
    "QnnSignal_trigger", "QnnSignal_free", "QnnError_getMessage", "QnnError_getVerboseMessage",
    "QnnError_freeVerboseMessage", "QnnGraph_prepareExecutionEnvironment",
    "QnnGraph_releaseExecutionEnvironment", "QnnGraph_getProperty", "QnnContext_validateBinary",
    "QnnContext_createFromBinaryWithSignal", "QnnContext_createFromBinaryListAsync",
    "QnnTensor_updateGraphTensors", "QnnTensor_updateContextTensors",
    "QnnContext_getBinarySectionSize", "QnnContext_getBinarySection",
    "QnnContext_applyBinarySection", "QnnBackend_getProperty", "QnnContext_getProperty",
    "QnnContext_getIncrementalBinary", "QnnContext_releaseIncrementalBinary",
    "QnnContext_finalize", "QnnGlobalConfig_set", "QnnContext_createFromBinaryWithCallback")
"""QNN's function table (QNN_INTERFACE_VER_TYPE, QnnInterface.h order) as executorch 1.5.1 was
built with it (core API 2.27: 69 entries, a 592-byte QnnInterface_t): the interposer wraps
every entry but the two that take a struct by value (QnnBackend_validateOpConfig,
QnnGraph_addNode, never called once a program is prepared), the 14 it traces by kind and the
rest as `call api=NAME rc=N`. The interposer's names are these (and STEP_POINTS,
DLOPEN_POINTS, QNN_SYSTEM_TABLE), through harness/qnn/api_names.h, which
`python -m harness.qnn.api_names` writes from them."""
QNN_SYSTEM_TABLE = ("QnnSystemContext_create", "QnnSystemContext_getBinaryInfo",
                    "QnnSystemContext_getMetadata", "QnnSystemContext_free")
"""The first entries of libQnnSystem.so's function table (QnnSystemInterface.h order), which
the dlopen shim wraps when the runtime opens that library (the rest take a struct by value
or serve the ahead-of-time DLC flow)."""
QNN_APIS = tuple(name for name in QNN_TABLE
                 if name not in ("QnnBackend_validateOpConfig", "QnnGraph_addNode")
                 ) + QNN_SYSTEM_TABLE + ("QnnInterface_getProviders",
                                         "QnnSystemInterface_getProviders")
"""The QNN functions a rule may name (QnnInterface_getProviders and
QnnSystemInterface_getProviders, the dlopen shim's: a failure there is the library being
unusable after it loaded)."""
STEP_POINTS = tuple(f"step.{op}" for op in
                    ("load_module", "load_method", "execute", "unload_method", "destroy_module"))
DLOPEN_POINTS = tuple(f"dlopen.{lib}" for lib in
                      ("libQnnHtp.so", "libQnnSystem.so", "libcdsprpc.so", "libQnnHtpPrepare.so"))
"""The runtime's dlopen of a QNN library by its base name (the dlopen shim, preloaded into
runners on the simulator: harness/qnn/interposer.c, HARNESS_DLOPEN_SHIM); a `fail` rule on
one makes that dlopen return NULL with the loader's own dlerror()."""
APIS = QNN_APIS + STEP_POINTS + DLOPEN_POINTS

QNN_ERRORS: dict[str, int] = {
    "QNN_COMMON_ERROR_NOT_SUPPORTED": 1000,
    "QNN_COMMON_ERROR_MEM_ALLOC": 1002,
    "QNN_COMMON_ERROR_GENERAL": 1100,
    "QNN_CONTEXT_ERROR_INVALID_ARGUMENT": 5000,
    "QNN_CONTEXT_ERROR_CREATE_FROM_BINARY": 5005,
    "QNN_GRAPH_ERROR_INVALID_HANDLE": 6001,
    "QNN_DEVICE_ERROR_INVALID_CONFIG": 14001,
}
"""QNN error codes by their header names (QnnCommon.h, QnnContext.h, QnnGraph.h, QnnDevice.h),
the ones a rule may name; any other positive code is given as a number."""

DEFAULT_TIMEOUT_MS = 10000
MAX_RULES = 32
ACTOR_BYTES = 15  # a thread name's length (pthread_setname_np)

Phase = Literal["enter", "leave"]
_ACTOR = re.compile(r"^[A-Za-z0-9_.\-]{1,15}$")
_CALL = re.compile(r"^(?:(?P<actor>[^:#\s]+):)?(?P<api>[A-Za-z_.]+)#(?P<n>[0-9]+)(?P<plus>\+?)$")


class NemesisError(HarnessError):
    """A nemesis rule the interposer could not apply as written."""


@dataclasses.dataclass(frozen=True)
class Call:
    """The n-th call of `api` (by `actor`'s threads, or by any thread when None)."""

    api: str
    n: int
    actor: str | None = None
    from_on: bool = False  # fail only: this call and every later one

    def __str__(self) -> str:
        who = f"{self.actor}:" if self.actor else ""
        return f"{who}{self.api}#{self.n}{'+' if self.from_on else ''}"


@dataclasses.dataclass(frozen=True)
class Fail:
    call: Call
    rc: int

    def __str__(self) -> str:
        return f"fail {self.call} rc={self.rc}"


@dataclasses.dataclass(frozen=True)
class Hold:
    phase: Phase
    at: Call
    until_phase: Phase
    until: Call
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    def __str__(self) -> str:
        tail = "" if self.timeout_ms == DEFAULT_TIMEOUT_MS else f" timeout_ms={self.timeout_ms}"
        return f"hold {self.phase} {self.at} until {self.until_phase} {self.until}{tail}"


Rule = Fail | Hold


def error_code(code: int | str) -> int:
    """A QNN error code from its number or its header name."""
    if isinstance(code, str):
        if code in QNN_ERRORS:
            return QNN_ERRORS[code]
        if not code.isdigit():
            raise NemesisError(f"unknown QNN error {code!r}: give a number or one of "
                               f"{', '.join(QNN_ERRORS)}")
        code = int(code)
    if isinstance(code, bool) or code <= 0:
        raise NemesisError(f"a failure's QNN error code must be positive, got {code!r}")
    return code


def _call(text: str, where: str, allow_plus: bool) -> Call:
    m = _CALL.match(text)
    if not m:
        raise NemesisError(f"{where}: {text!r} is not [ACTOR:]API#N")
    api, actor = m["api"], m["actor"]
    if api not in APIS:
        raise NemesisError(f"{where}: unknown API {api!r} (one of {', '.join(APIS)})")
    if actor is not None and not _ACTOR.match(actor):
        raise NemesisError(f"{where}: actor {actor!r} must be a module name of at most "
                           f"{ACTOR_BYTES} letters, digits, '_', '.' or '-'")
    if int(m["n"]) < 1:
        raise NemesisError(f"{where}: occurrences count from 1, got #{m['n']}")
    if m["plus"] and not allow_plus:
        raise NemesisError(f"{where}: '+' (every call from the n-th on) is for fail rules")
    return Call(api, int(m["n"]), actor, bool(m["plus"]))


def parse_rule(text: str) -> Rule:
    """One rule from its text (the grammar in this module's docstring)."""
    where = f"nemesis rule {text!r}"
    if not isinstance(text, str) or ";" in text or "\n" in text:
        raise NemesisError(f"{where}: a rule is one line without ';'")
    words = text.split()
    if len(words) == 3 and words[0] == "fail" and words[2].startswith("rc="):
        return Fail(_call(words[1], where, True), error_code(words[2][3:]))
    if words[:1] == ["hold"] and len(words) in (6, 7) and words[3] == "until":
        phases = (words[1], words[4])
        if any(p not in ("enter", "leave") for p in phases):
            raise NemesisError(f"{where}: a point is 'enter' or 'leave' a call")
        timeout = DEFAULT_TIMEOUT_MS
        if len(words) == 7:
            if not re.fullmatch(r"timeout_ms=[1-9][0-9]*", words[6]):
                raise NemesisError(f"{where}: the last field is timeout_ms=<positive int>")
            timeout = int(words[6].partition("=")[2])
        return Hold(words[1], _call(words[2], where, False),  # type: ignore[arg-type]
                    words[4], _call(words[5], where, False), timeout)  # type: ignore[arg-type]
    raise NemesisError(f"{where}: expected 'fail [ACTOR:]API#N[+] rc=CODE' or 'hold "
                       "enter|leave [ACTOR:]API#N until enter|leave [ACTOR:]API#N "
                       "[timeout_ms=T]'")


def check_rules(raw: Any) -> tuple[str, ...]:
    """The `qnn_nemesis` field of a scenario document, checked; each rule in its canonical
    text (what the interposer reads)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(r, str) for r in raw):
        raise NemesisError("field 'qnn_nemesis' must be an array of rule strings")
    if len(raw) > MAX_RULES:
        raise NemesisError(f"field 'qnn_nemesis' holds {len(raw)} rules, at most {MAX_RULES}")
    return tuple(str(parse_rule(r)) for r in raw)


def check_hold_timeouts(rules: Sequence[str], runner_timeout_s: float) -> None:
    """Refuse a hold whose timeout the run cannot outlive: NemesisError naming the rule.

    A hold that waits past the runner timeout never reports itself: the runner is killed
    first and the run ends as "runner hung", not as the rendezvous that timed out. Each hold
    is bounded on its own, not their sum: the holds of one run mostly release in milliseconds
    (the forced concurrent executes hold 20 times, 200 s of timeouts together, over a phone's
    120 s runner timeout). Refused rather than clamped: a clamped hold would give up earlier
    than its scenario (and its replay and export, which carry the rule's text) says, turning a
    rendezvous met late into a timeout."""
    limit_ms = runner_timeout_s * 1000
    for i, text in enumerate(rules):
        rule = parse_rule(text)
        if isinstance(rule, Hold) and rule.timeout_ms >= limit_ms:
            raise NemesisError(
                f"nemesis rule {i} '{text}': timeout_ms={rule.timeout_ms} is not under the "
                f"runner timeout ({runner_timeout_s:g} s), so a rendezvous that never happens "
                "would end as a hung runner instead of this rule timing out; lower the rule's "
                f"timeout_ms (default {DEFAULT_TIMEOUT_MS}) or raise --runner-timeout")


def fail_at(api: str, n: int, rc: int | str = "QNN_COMMON_ERROR_GENERAL",
            actor: str | None = None, from_on: bool = False) -> str:
    """The text of a fail rule."""
    return str(Fail(_call(f"{actor + ':' if actor else ''}{api}#{n}{'+' if from_on else ''}",
                          "fail_at", True), error_code(rc)))


def hold(phase: Phase, at: str, until_phase: Phase, until: str,
         timeout_ms: int = DEFAULT_TIMEOUT_MS) -> str:
    """The text of a hold rule, points as "[ACTOR:]API#N"."""
    return str(parse_rule(f"hold {phase} {at} until {until_phase} {until}"
                          + ("" if timeout_ms == DEFAULT_TIMEOUT_MS else f" timeout_ms={timeout_ms}")))


@dataclasses.dataclass(frozen=True)
class NemesisEvent:
    """One trace line of the nemesis: what a rule did."""

    kind: str  # "hold", "release", "timeout", "fail", "bad", "rules"
    rule: int | None
    fields: dict[str, str]


def nemesis_events(records: Iterable[Any]) -> list[NemesisEvent]:
    """The nemesis lines of a QNN trace (harness.qnn.trace records), in order."""
    out = []
    for rec in records:
        if rec.kind.startswith("nemesis_"):
            rule = rec.fields.get("rule")
            out.append(NemesisEvent(rec.kind[len("nemesis_"):],
                                    int(rule) if rule and rule.isdigit() else None,
                                    dict(rec.fields)))
    return out


def nemesis_problems(rules: Sequence[str], events: Sequence[NemesisEvent],
                     finished: bool) -> list[str]:
    """Why a run did not do what its rules said: a rendezvous that timed out, a rule the
    interposer could not read, the interposer never seeing the rules, and (for a run that
    finished) a rule that never took effect. Empty when every rule did."""
    if not rules:
        return []
    problems = []
    late = {e.rule for e in events if e.kind == "late"}
    held = {e.rule: e for e in events if e.kind == "hold"}
    for e in events:
        if e.kind == "timeout" and e.rule is not None and e.rule < len(rules) \
                and e.rule not in late:
            problems.append(f"rendezvous timed out after {e.fields.get('waited_ms')} ms: "
                            f"rule {e.rule} '{rules[e.rule]}': "
                            f"{_waiting(rules[e.rule], held.get(e.rule))}")
        elif e.kind == "bad":
            problems.append(f"the QNN interposer could not read nemesis rule {e.fields}")
    if not any(e.kind == "rules" for e in events):
        if finished:
            problems.append("the QNN interposer never read the scenario's nemesis rules (no "
                            "QNN call was made, or the runner does not pass qnn_nemesis on)")
        return problems
    if finished:
        took = {e.rule for e in events if e.kind in ("hold", "fail")}
        problems += [f"nemesis rule {i} '{r}' never took effect: the runtime did not reach "
                     f"that point in this run" for i, r in enumerate(rules) if i not in took]
    return problems


def _waiting(text: str, hold_event: NemesisEvent | None) -> str:
    """Who waited where, and for what, in a timed-out hold: the thread the interposer held
    (its `nemesis_hold` line) and the point no thread reached."""
    rule = parse_rule(text)
    if not isinstance(rule, Hold):
        return "waited for a point no thread reached"
    actor = hold_event.fields.get("actor") if hold_event is not None else None
    who = f"thread {actor!r}" if actor else "the held thread"
    return (f"{who} waited at {rule.phase} {rule.at} for {rule.until_phase} {rule.until}, "
            "which no thread reached")


def unreachable_rendezvous(rules: Sequence[str], events: Sequence[NemesisEvent]) -> list[str]:
    """The holds whose rendezvous the runtime itself made impossible: the held thread waited
    its whole timeout and the point it waited for came only after it went on (a `late` event).
    A runtime that orders those two calls itself (a lock around init, destroy kept out of a
    running execute) cannot be forced into that interleaving; the test judges its property on
    the run that did happen, and says so."""
    timeouts = {e.rule: e for e in events if e.kind == "timeout"}
    out = []
    for e in events:
        if e.kind != "late" or e.rule is None or e.rule >= len(rules) or e.rule not in timeouts:
            continue
        rule = parse_rule(rules[e.rule])
        assert isinstance(rule, Hold)
        waited = timeouts[e.rule].fields.get("waited_ms", "?")
        who = f"thread {rule.at.actor!r}" if rule.at.actor else "the held thread"
        came = e.fields.get("actor") or "another thread"
        out.append(f"rule {e.rule} '{rules[e.rule]}': {who} waited {waited} ms at {rule.phase} "
                   f"{rule.at}, and {came!r} reached {rule.until_phase} {rule.until} only after "
                   "it went on: the runtime orders these calls itself, so this interleaving "
                   "cannot happen on it")
    return out
