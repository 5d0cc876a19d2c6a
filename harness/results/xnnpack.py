"""XNNPACK packed-weight cache: where did the packed weights go, heap or the mmap'd cache file?

When the cache file cannot be used, ExecuTorch's XNNPACK backend packs weights into heap
memory and still reports success; the only symptom is dirty anonymous memory. This module
tells the two apart from the outside, from the per-step memory readings every runner reports,
so it works on any runtime version:

- heap bytes: growth of `Anonymous` (smaps_rollup) from the step before the module's
  `load_module` to its first `execute` (delegate init packs the weights there);
- mapped bytes: `Rss` of the cache file's own mappings (`watch_mappings`) after that execute.

A load is `mapped` when less than `HEAP_LIMIT` of the weight bytes went to heap and at least
`MAPPED_MIN` of them sit in the cache file's mappings; it is a `fallback` when at least
`HEAP_LIMIT` went to heap (a partial cache is a fallback too); anything else is
`inconclusive` (e.g. the execute never ran).

Where a runtime publishes its own packed-cache counters through backend options
(`COUNTER_KEYS`), `add_counter_probes` reads them and `check_counters` compares them with the
measurement. Runtimes that do not know a key (1.5.1) answer `get_option` with Ok and leave the
caller's value alone; the probe asks for a *string*, a value no runtime that publishes the
counter would leave empty, so an untouched empty string means "not exposed".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.log import notice
from harness.results import xnnpack_log
from harness.results.run import ScenarioResult, StepResult
from harness.scenario import Scenario

_log = logging.getLogger(__name__)
BACKEND = "XnnpackBackend"
HEAP_LIMIT = 0.10  # of the weight bytes: more than this on the heap is a fallback
MAPPED_MIN = 0.90  # of the weight bytes: a mapped load has at least this in the cache file
MIB = 1 << 20
# The keys upstream PR 22413 ("Report whether XNNPACK packed weights fell back to heap") reads
# through backend options.
COUNTER_KEYS = ("packed_cache_state", "packed_cache_heap_mib", "packed_cache_mapped_mib",
                "packed_cache_errno", "packed_cache_heap_reason", "packed_cache_file_mib")
# packed_cache_state only separates "feature off" from "in use" (the PR: a partial cache stays
# file-backed, the byte counters are the signal); these answers mean off.
COUNTER_OFF = ("off", "disabled", "none", "0")

# The runtime's own words about the cache file: every line of XNNWeightsCache.cpp (and the
# backend's), plus the 1.5.1 phrases a build without file names in its log would still print.
_CACHE_LOG = re.compile(
    r"(Loaded packed weight cache|Opened packed weight file|Saved packed weight index|"
    r"Synced \d+ new regions|failed \(errno=\d+\)|heap fallback|load_packed_cache|seed mismatch|"
    r"weight cache failed|reserve_space|for index|fsync of packed cache)|" + xnnpack_log.LINE.pattern,
    re.IGNORECASE)


def cache_options(path: str | None, enabled: bool = True) -> dict[str, dict[str, Any]]:
    """`load_module` backend options for the XNNPACK weight cache at `path` (None: no cache)."""
    if path is None or not enabled:
        return {BACKEND: {"weight_cache_enabled": False}}
    return {BACKEND: {"weight_cache_enabled": True, "packed_cache_path": path}}


# Memory readings -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MemorySplit:
    """One step's process memory in bytes, split by what backs it."""

    anonymous: int  # smaps_rollup Anonymous: heap and other anonymous pages
    private_dirty: int  # smaps_rollup Private_Dirty
    file_backed: int  # Rss - Anonymous: pages of mapped files (.pte, libraries, cache file)
    cache_mapped: int  # Rss of the cache file's own mappings (0 when not watched/mapped)

    @classmethod
    def of(cls, step: StepResult, cache_path: str | None = None) -> MemorySplit:
        rollup = step.memory.get("rollup") or {}
        if "Anonymous" not in rollup or "Rss" not in rollup:
            raise AssertionError(f"step {step.step.describe()}: no smaps_rollup reading "
                                 f"(status {step.status})")
        mapping = find_mapping(step.memory.get("mappings") or {}, cache_path) if cache_path else None
        kb = 1024
        return cls(rollup["Anonymous"] * kb, rollup.get("Private_Dirty", 0) * kb,
                   (rollup["Rss"] - rollup["Anonymous"]) * kb,
                   (mapping or {}).get("Rss", 0) * kb)


def find_mapping(mappings: dict[str, dict[str, Any]], path: str) -> dict[str, Any] | None:
    """The `mappings` entry of `path` as the scenario named it.

    Runners report a watched path under its absolute normalized spelling; a relative name (an
    adb device's scratch paths are relative to the run directory) is matched on its normalized
    tail, e.g. "../../scratch/c/x.bin" matches "/data/local/tmp/ws/scratch/c/x.bin".
    """
    if path in mappings:
        return mappings[path]
    normal = {posixpath.normpath(k): v for k, v in mappings.items()}
    wanted = posixpath.normpath(path)
    if wanted in normal:
        return normal[wanted]
    if not posixpath.isabs(wanted):
        parts = [p for p in wanted.split("/") if p not in ("", ".", "..")]
        tail = "/" + "/".join(parts)
        hits = [v for k, v in normal.items() if k.endswith(tail)]
        if len(hits) == 1:
            return hits[0]
    return None


# Classification ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CacheLoad:
    """Where one module's packed weights went."""

    scenario: str
    module: str
    method: str
    cache_path: str | None
    classification: str  # "mapped" | "fallback" | "inconclusive"
    weight_bytes: int
    heap_bytes: int  # Anonymous growth, load_module's previous step -> first execute
    mapped_bytes: int  # Rss of the cache file's mappings after the first execute
    file_backed_growth: int  # (Rss - Anonymous) growth over the same steps
    private_dirty_growth: int
    before: int  # step indices the numbers come from
    after: int
    runtime_log: tuple[str, ...] = ()  # the runtime's own lines about the cache file
    # why, in the runtime's words (harness.results.xnnpack_log): the branch the launch took,
    # its errno and one sentence; loaded_entries: the entries of an index it loaded
    branch: str = ""
    errno: int | None = None
    reason: str = ""
    loaded_entries: int | None = None

    @property
    def heap_fraction(self) -> float:
        return self.heap_bytes / self.weight_bytes if self.weight_bytes else 0.0

    @property
    def mapped_fraction(self) -> float:
        return self.mapped_bytes / self.weight_bytes if self.weight_bytes else 0.0

    @property
    def errnos(self) -> list[int]:
        """errno values the runtime logged for failed calls on the cache file."""
        return [e.errno for e in xnnpack_log.events(self.runtime_log) if e.errno is not None]

    def describe(self) -> str:
        cache = f"cache {self.cache_path}" if self.cache_path else "no cache requested"
        text = (f"{self.scenario}: module {self.module} ({self.method}, {cache}): "
                f"{self.classification}; heap +{_mib(self.heap_bytes)} "
                f"({self.heap_fraction:.0%} of {_mib(self.weight_bytes)} weights), cache file "
                f"mapped {_mib(self.mapped_bytes)} ({self.mapped_fraction:.0%}), file-backed "
                f"{_signed_mib(self.file_backed_growth)}, Private_Dirty "
                f"{_signed_mib(self.private_dirty_growth)} (steps {self.before}->{self.after})")
        if self.reason:
            text += f"\n  why ({self.branch}, errno {xnnpack_log.errno_name(self.errno)}): {self.reason}"
        if self.runtime_log:
            text += "\n  runtime: " + "\n  runtime: ".join(self.runtime_log)
        return text

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["runtime_log"] = list(self.runtime_log)
        return doc


def classify(heap_bytes: int, mapped_bytes: int, weight_bytes: int) -> str:
    if weight_bytes <= 0:
        raise ValueError("weight_bytes must be positive")
    if heap_bytes >= HEAP_LIMIT * weight_bytes:
        return "fallback"
    if mapped_bytes >= MAPPED_MIN * weight_bytes:
        return "mapped"
    return "inconclusive"


def cache_log(result: ScenarioResult) -> tuple[str, ...]:
    """The runtime's log lines about the packed-weight cache file, in order."""
    text = result.output.stderr + "\n" + result.output.stdout
    return tuple(line.strip() for line in text.splitlines()
                 if _CACHE_LOG.search(line) and not line.startswith("HARNESS_EVENT"))


def classify_load(result: ScenarioResult, weight_bytes: int, module: str | None = None,
                  cache_path: str | None = None, expected: str | None = None) -> CacheLoad:
    """Classify the packed-weight placement of `module` (default: the first module loaded).

    `cache_path` defaults to the `packed_cache_path` of the module's `load_module` step; it
    must be in the scenario's `watch_mappings` for its mapped bytes to be measured.
    `expected`: the placement the test expects ("mapped", "fallback"), for the report only
    (the test asserts it itself).
    """
    load = _classify_load(result, weight_bytes, module, cache_path)
    _note_verdict(load, expected)
    return load


def _classify_load(result: ScenarioResult, weight_bytes: int, module: str | None,
                   cache_path: str | None) -> CacheLoad:
    name = result.scenario.name
    loads = [i for i, s in enumerate(result.steps) if s.step.op == "load_module"
             and (module is None or s.step.module == module)]
    if not loads:
        raise AssertionError(f"scenario {name}: no load_module step for module {module!r}")
    load = loads[0]
    module = result.steps[load].step.module
    if load == 0:
        raise AssertionError(f"scenario {name}: load_module({module}) is the first step; "
                             "put a snapshot before it to have a baseline")
    execs = [i for i in range(load + 1, len(result.steps))
             if result.steps[i].step.op == "execute" and result.steps[i].step.module == module]
    if not execs:
        raise AssertionError(f"scenario {name}: module {module} is never executed")
    after = execs[0]
    before = load - 1
    if cache_path is None:
        cache_path = requested_cache_path(result.steps[load])
    found = classify_span(result, weight_bytes, before, after, cache_path, module or "",
                          result.steps[after].step.method or "")
    xnn = (result.steps[load].step.args.get("backend_options") or {}).get(BACKEND) or {}
    earlier = sum(1 for s in result.steps[:load] if s.step.op == "load_module"
                  and cache_path and requested_cache_path(s) == cache_path)
    why = xnnpack_log.launch_reason(found.runtime_log, xnn.get("packed_cache_path"),
                                    bool(xnn.get("weight_cache_enabled", bool(xnn))),
                                    found.classification, earlier)
    return dataclasses.replace(found, branch=why.branch, errno=why.errno, reason=why.reason,
                               loaded_entries=why.loaded_entries)


def requested_cache_path(load_step: StepResult) -> str | None:
    """The packed_cache_path a load_module step asked for (None: cache off or not asked)."""
    options = load_step.step.args.get("backend_options") or {}
    xnn = options.get(BACKEND) or {}
    if xnn.get("weight_cache_enabled", True) and xnn.get("packed_cache_path"):
        path: str = xnn["packed_cache_path"]
        return path
    return None


def classify_span(result: ScenarioResult, weight_bytes: int, before: int, after: int,
                  cache_path: str | None, module: str = "*", method: str = "") -> CacheLoad:
    """Classify whatever was packed between steps `before` and `after` (several modules at
    once, e.g. to compare with process-wide runtime counters)."""
    for index in (before, after):
        if result.steps[index].event is None:
            raise AssertionError(f"scenario {result.scenario.name}: step {index} "
                                 f"{result.steps[index].step.describe()} never reported "
                                 f"(runner stopped early)\n{result.summary()}")
    a = MemorySplit.of(result.steps[before], cache_path)
    b = MemorySplit.of(result.steps[after], cache_path)
    heap = b.anonymous - a.anonymous
    mapped = b.cache_mapped
    return CacheLoad(
        scenario=result.scenario.name, module=module, method=method,
        cache_path=cache_path, classification=classify(heap, mapped, weight_bytes),
        weight_bytes=weight_bytes, heap_bytes=heap, mapped_bytes=mapped,
        file_backed_growth=b.file_backed - a.file_backed,
        private_dirty_growth=b.private_dirty - a.private_dirty, before=before, after=after,
        runtime_log=cache_log(result))


def memory_table(result: ScenarioResult, cache_path: str | None = None) -> str:
    """Per-step memory split (MiB) of a result, for failure messages and artifacts."""
    lines = [f"  {'step':<28} {'status':<9} {'anon':>9} {'priv_dirty':>10} {'file':>9} "
             f"{'cache_rss':>9}"]
    for i, s in enumerate(result.steps):
        if not s.memory.get("rollup"):
            lines.append(f"  {i:>2} {s.step.describe():<25} {s.status:<9} (no reading)")
            continue
        m = MemorySplit.of(s, cache_path)
        lines.append(f"  {i:>2} {s.step.describe():<25} {s.status:<9} {m.anonymous / MIB:>9.1f} "
                     f"{m.private_dirty / MIB:>10.1f} {m.file_backed / MIB:>9.1f} "
                     f"{m.cache_mapped / MIB:>9.1f}")
    return "\n".join(lines)


# Verdicts made during a test, for reports (harness.report.plugin collects them per test) ---------
_verdict_sinks: list[list[tuple[CacheLoad, str | None]]] = []


@contextlib.contextmanager
def collect_verdicts() -> Iterator[list[tuple[CacheLoad, str | None]]]:
    """Every load classified inside the block: (CacheLoad, what the test expected: "mapped",
    "fallback", or None for a bare `classify_load`)."""
    sink: list[tuple[CacheLoad, str | None]] = []
    _verdict_sinks.append(sink)
    try:
        yield sink
    finally:
        _verdict_sinks.remove(sink)


def _note_verdict(load: CacheLoad, expected: str | None) -> None:
    for sink in _verdict_sinks:
        sink.append((load, expected))


# Assertions ----------------------------------------------------------------------------------
def assert_no_fallback(result: ScenarioResult, weight_bytes: int, module: str | None = None,
                       cache_path: str | None = None, branch: str | None = None) -> CacheLoad:
    """The module's packed weights live in the cache file's mapping, not on the heap (and
    the runtime's log shows `branch`, when given)."""
    load = _classify_load(result, weight_bytes, module, cache_path)
    _note_verdict(load, "mapped")
    if load.classification != "mapped":
        raise AssertionError(
            f"XNNPACK packed weights not served from the cache file: {load.describe()}\n"
            f"needs heap < {HEAP_LIMIT:.0%} and cache-file mapping >= {MAPPED_MIN:.0%} of the "
            f"weights\nmemory (MiB):\n{memory_table(result, load.cache_path)}")
    _check_branch(load, branch, result)
    return load


def assert_fallback(result: ScenarioResult, weight_bytes: int, module: str | None = None,
                    cache_path: str | None = None, min_heap: float | None = None,
                    branch: str | None = None) -> CacheLoad:
    """The module's weights went to the heap (at least `min_heap` of them): a detected fallback.

    `min_heap` defaults to 80 % for a launch that loaded no index, and to `HEAP_LIMIT` for one
    that did: a partial cache maps the packs it has and heaps the rest, both large. `branch`:
    the branch the runtime's log must show (harness.results.xnnpack_log), e.g. "open_failed".
    """
    load = _classify_load(result, weight_bytes, module, cache_path)
    _note_verdict(load, "fallback")
    if min_heap is None:
        min_heap = HEAP_LIMIT if load.loaded_entries else 0.8
    if load.classification != "fallback" or load.heap_bytes < min_heap * weight_bytes:
        raise AssertionError(
            f"expected a heap fallback with >= {min_heap:.0%} of the weights on the heap: "
            f"{load.describe()}\nmemory (MiB):\n{memory_table(result, load.cache_path)}")
    _check_branch(load, branch, result)
    return load


def _check_branch(load: CacheLoad, branch: str | None, result: ScenarioResult) -> None:
    if branch is not None and load.branch != branch:
        raise AssertionError(
            f"expected the runtime to take branch {branch!r}, its log says {load.branch!r}: "
            f"{load.describe()}\nrun stderr tail:\n{result.output.stderr[-2000:]}")


def assert_cache_steps_ok(result: ScenarioResult) -> None:
    """No crash, every load/execute/destroy step ok (outputs match the CPU reference).

    `get_option` steps are left out: a runtime may reject counter keys it does not know.
    """
    from harness.results.assertions import assert_completed, runtime_log
    from harness.results.failures import HilFailure, run_failures

    assert_completed(result)
    bad = [(i, s) for i, s in enumerate(result.steps) if s.step.op != "get_option" and not s.ok]
    if bad:
        lines = []
        for i, s in bad:
            diff = (s.event or {}).get("max_abs_diff")
            extra = f" (max_abs_diff {diff})" if s.status == "mismatch" else ""
            lines.append(f"step {i} {s.describe()}{extra}")
        wrong = any(s.status == "mismatch" for _, s in bad)
        head = ("WRONG OUTPUTS with the XNNPACK packed-weight cache" if wrong
                else "XNNPACK packed-weight cache scenario failed")
        first = next(f for f in run_failures(result) + [None]
                     if f is None or f.step == bad[0][0])
        report = (f"scenario {result.scenario.name}: {head}:\n  " + "\n  ".join(lines) +
                  "\ncache log:\n    " + "\n    ".join(cache_log(result)) +
                  f"\nruntime log:\n{runtime_log(result)}\nall steps:\n{result.summary()}")
        if first is None:
            raise AssertionError(report)
        raise HilFailure(report, first)


# Runtime counters ----------------------------------------------------------------------------
def add_counter_probes(scenario: Scenario, keys: tuple[str, ...] = COUNTER_KEYS) -> Scenario:
    """Two `get_option` steps per counter: a string-typed probe, then the int-typed read."""
    for key in keys:
        scenario.get_option(BACKEND, key, "string").allow_error()
        scenario.get_option(BACKEND, key, "int").allow_error()
    return scenario


@dataclasses.dataclass(frozen=True)
class RuntimeCounters:
    values: dict[str, Any]  # key -> value, for the keys the runtime publishes
    missing: tuple[str, ...]  # probed keys the runtime does not publish
    evidence: dict[str, str]  # key -> why it was judged published or not

    @property
    def exposed(self) -> bool:
        return bool(self.values)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def read_counters(result: ScenarioResult) -> RuntimeCounters:
    """The counters from `add_counter_probes` steps; which keys the runtime really publishes."""
    answers: dict[str, dict[str, StepResult]] = {}
    for s in result.steps:
        if s.step.op == "get_option" and s.step.args.get("backend") == BACKEND:
            answers.setdefault(s.step.args["key"], {})[s.step.args.get("type", "int")] = s
    values: dict[str, Any] = {}
    missing: list[str] = []
    evidence: dict[str, str] = {}
    for key, by_type in answers.items():
        probe, typed = by_type.get("string"), by_type.get("int")
        if probe is None or probe.event is None:
            continue
        option = probe.event.get("option") or {}
        if probe.ok and option.get("value") == "":
            missing.append(key)
            evidence[key] = "get_option returned Ok and left the caller's empty string untouched"
        elif probe.ok:
            values[key] = option.get("value")
            evidence[key] = f"string probe answered {option.get('value')!r}"
        elif typed is not None and typed.ok:
            values[key] = ((typed.event or {}).get("option") or {}).get("value")
            evidence[key] = "rejects a string probe, answers the int read"
        else:
            missing.append(key)
            evidence[key] = f"get_option failed: {probe.event.get('message')}"
    return RuntimeCounters(values, tuple(missing), evidence)


def check_counters(counters: RuntimeCounters, load: CacheLoad, tolerance_mib: float = 2.0,
                   file_bytes: int | None = None) -> list[str]:
    """Disagreements between the runtime's published counters and the measured placement:
    heap and mapped MiB against memory, the state as the PR defines it (off vs in use), a heap
    reason whenever packs went to heap, `_file_mib` against the file's size (`file_bytes`)."""
    problems: list[str] = []
    v = counters.values
    for key, measured in (("packed_cache_heap_mib", load.heap_bytes),
                          ("packed_cache_mapped_mib", load.mapped_bytes)):
        if key in v:
            try:
                said = float(v[key])
            except (TypeError, ValueError):
                problems.append(f"{key}={v[key]!r} is not a number")
                continue
            allowed = max(tolerance_mib, 0.1 * load.weight_bytes / MIB)
            if abs(said - measured / MIB) > allowed:
                problems.append(f"{key}={said:g} but measured {measured / MIB:.1f} MiB "
                                f"(allowed difference {allowed:.1f} MiB)")
    if "packed_cache_state" in v and load.classification != "inconclusive":
        off = str(v["packed_cache_state"]).strip().lower() in COUNTER_OFF
        if off and load.cache_path:
            problems.append(f"packed_cache_state={v['packed_cache_state']!r} (off) but the load "
                            f"asked for the cache at {load.cache_path}")
        elif not off and not load.cache_path and load.branch in ("", "cache_off"):
            problems.append(f"packed_cache_state={v['packed_cache_state']!r} (in use) but the "
                            "cache was disabled")
    reason = v.get("packed_cache_heap_reason")
    if load.classification == "fallback" and load.cache_path and "packed_cache_heap_reason" in v \
            and str(reason or "").strip().lower() in ("", "none", "0"):
        problems.append(f"packed_cache_heap_reason={reason!r} but "
                        f"{load.heap_bytes / MIB:.1f} MiB went to heap ({load.branch})")
    if "packed_cache_file_mib" in v and file_bytes is not None:
        try:
            said = float(v["packed_cache_file_mib"])
        except (TypeError, ValueError):
            problems.append(f"packed_cache_file_mib={v['packed_cache_file_mib']!r} is not a number")
        else:
            if abs(said - file_bytes / MIB) > tolerance_mib:
                problems.append(f"packed_cache_file_mib={said:g} but the file has "
                                f"{file_bytes / MIB:.1f} MiB")
    if ("packed_cache_errno" in v and load.errnos
            and v["packed_cache_errno"] not in load.errnos):
            problems.append(f"packed_cache_errno={v['packed_cache_errno']!r} but the runtime "
                            f"logged errno {', '.join(map(str, load.errnos))}")
    return problems


def assert_counters_agree(counters: RuntimeCounters, load: CacheLoad,
                          file_bytes: int | None = None) -> None:
    problems = check_counters(counters, load, file_bytes=file_bytes)
    if problems:
        raise AssertionError("runtime packed-cache counters disagree with measured memory "
                             f"({load.describe()}):\n  " + "\n  ".join(problems))


_said: set[str] = set()  # runtime versions whose missing counters this process has said


def counters_notice_key(version: str) -> str:
    """What makes two notices about missing counters one: the runtime version (an xdist
    worker's and the controller's, or two workers', are the same finding)."""
    return f"xnnpack-counters:{version}"


def note_counters(counters: RuntimeCounters, version: str, artifacts: Path | None = None) -> None:
    """Record what the runtime publishes: in the artifacts, and, when it publishes none of the
    counters, one session notice (not a failure: the measurement stands alone). A notice, not
    a warning: pytest lists a warning under every test that raised it and each xdist worker
    raises its own; the session says a notice once, the controller once for all its workers
    (harness.plugin.terminal)."""
    if artifacts is not None:
        from harness.log import disk_full_tolerated

        with disk_full_tolerated(artifacts, "xnnpack_counters.json"):
            artifacts.mkdir(parents=True, exist_ok=True)
            (artifacts / "xnnpack_counters.json").write_text(json.dumps(
                {"executorch": version, **counters.to_json()}, indent=1))
    if counters.missing and not counters.exposed and version not in _said:
        _said.add(version)
        notice(_log, f"executorch {version}: XnnpackBackend publishes no packed-cache counters "
               f"({', '.join(counters.missing)}: get_option leaves the value untouched); "
               "packed-weight placement is checked from measured memory only", True,
               key=counters_notice_key(version))


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


def _signed_mib(n: int) -> str:
    return f"{n / MIB:+.1f} MiB"
