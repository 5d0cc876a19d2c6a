"""A run's results as plain data: the `results.json` schema and per-test metrics.

`--hil-report DIR` writes `DIR/results.json` (docs/results-schema.md documents every field):
one entry per scenario run, with its steps (op, status, the runtime's message, elapsed ms, live
QNN counts, memory) and failures, plus one entry per test with its outcome and metrics.
`python -m harness compare` reads two of them. The same per-test metrics go to JUnit XML as
properties (harness.report.plugin).

Everything here works on JSON-ready dicts, so a results.json read back from disk and a run in
progress are measured by the same code.
"""

from __future__ import annotations

import json
import shlex
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.qnn.pairing import bridge_rewrites
from harness.protocol.nemesis import nemesis_events, unreachable_rendezvous
from harness.results.failures import Failure
from harness.results.run import ScenarioResult, StepResult

if TYPE_CHECKING:
    from harness.results.xnnpack import CacheLoad

SCHEMA = "executorch-hil-results/1"
MESSAGE_CHARS = 2000  # a failure's message (the runtime's words and log lines) is cut here
TIMED_OPS = ("load_method", "execute")  # steps whose elapsed_ms are per-method metrics
MEMORY_FIELDS = (("rss_kb", "Rss"), ("pss_kb", "Pss"), ("anonymous_kb", "Anonymous"),
                 ("private_dirty_kb", "Private_Dirty"), ("swap_kb", "Swap"))
PEAK_FIELDS = ("rss_kb", "pss_kb", "anonymous_kb", "dmabuf_bytes", "dsp_heap_bytes")


class ResultsError(HarnessError):
    """A results.json that is not one this version understands."""


# One scenario run -------------------------------------------------------------------------------
def step_memory(step: StepResult) -> dict[str, Any] | None:
    """The step's process memory: smaps_rollup values in kB, dma-buf in bytes, and the DSP
    heap QNN last reported by the end of the step (bytes; None where the device gives no such
    reading), malloc's bytes in use (None where the C library does not say); None when the
    runner reported no reading (a step that never ran)."""
    memory = step.memory
    rollup = memory.get("rollup") or {}
    dmabuf = memory.get("dmabuf") or {}
    if not rollup and not dmabuf:
        return None
    out = {key: rollup.get(field) for key, field in MEMORY_FIELDS}
    out["dmabuf_bytes"] = dmabuf.get("bytes")
    out["dmabuf_count"] = dmabuf.get("count")
    out["dsp_heap_bytes"] = step.trace.get("dsp_heap")
    heap = memory.get("heap") or {}
    out["malloc_in_use_bytes"] = heap.get("in_use")
    out["malloc_mmapped_bytes"] = heap.get("mmapped")
    return out


def step_entry(index: int, step: StepResult) -> dict[str, Any]:
    event = step.event or {}
    entry = {
        "index": index,
        "op": step.step.op,
        "target": step.step.describe(),
        "module": step.step.module,
        "method": step.step.method,
        "status": step.status,
        "error_code": event.get("error_code"),
        "message": event.get("message") or "",
        "elapsed_ms": event.get("elapsed_ms"),
        "live": dict(step.live),
        "memory": step_memory(step),
    }
    if step.step.op == "parallel":
        subs = event.get("substeps") or []
        entry["substeps"] = [
            {"op": sub.op, "module": sub.module, "method": sub.method,
             "status": (ev or {}).get("status", "not-run"),
             "message": (ev or {}).get("message") or "",
             "elapsed_ms": (ev or {}).get("elapsed_ms")}
            for sub, ev in zip(step.step.substeps, list(subs) + [None] * len(step.step.substeps))]
    return entry


def failure_entry(failure: Failure) -> dict[str, Any]:
    return {"kind": failure.kind, "scenario": failure.scenario or None, "step": failure.step,
            "where": failure.where, "message": _cut(failure.message)}


def run_entry(result: ScenarioResult, failures: list[Failure], *, nodeid: str, index: int,
              occurrence: int, device: str | None, xnnpack: Sequence[dict[str, Any]] = (),
              replay_args: list[str] | None = None) -> dict[str, Any]:
    """One scenario run of a test. `index`: its position among the test's runs (0-based);
    `occurrence`: how many earlier runs of the test had the same scenario name;
    `replay_args`: the device's own (`Device.replay_args`), for the replay command."""
    out = result.output
    return {
        "nodeid": nodeid,
        "scenario": result.scenario.name,
        "index": index,
        "occurrence": occurrence,
        "device": device,
        "runner": out.runner,
        "returncode": out.returncode,
        "timed_out": out.timed_out,
        "completed": result.completed,
        "failure_kind": result.failure_kind,
        "modules": {name: {"model": m.name, "precision": m.precision, "backend": m.backend,
                           "pte": Path(m.pte).name}
                    for name, m in result.scenario.models.items()},
        "steps": [step_entry(i, s) for i, s in enumerate(result.steps)],
        "failures": [failure_entry(f) for f in failures],
        # valgrind's findings (--valgrind): kind, stacks, sizes, library
        "memory_errors": [f.entry() for f in result.memory_findings],
        "xnnpack": list(xnnpack),
        "soak": result.soak,
        # the calls the ABI bridge rewrote in this run: a library-side failure after one may be
        # an artifact of the SDK pairing (harness.qnn.pairing)
        "abi_bridge": bridge_rewrites(result.trace),
        # forced interleavings this runtime cannot make (it orders those calls itself)
        "unreachable_rendezvous": unreachable_rendezvous(result.scenario.qnn_nemesis,
                                                         nemesis_events(result.trace)),
        "artifacts": str(result.artifacts) if result.artifacts else None,
        "replay": replay_command(result, failures, replay_args),
    }


def command_line(run_dir: Path, device_args: list[str] | None = None,
                 runner: str = "native") -> str:
    """The replay command for a run directory (ends every HIL failure message): on the same
    target (`Device.replay_args`; the simulator without), with the Python runner when the run
    had it."""
    argv = ["python", "-m", "harness", "replay", str(run_dir)]
    argv += list(device_args or ["--simulator"])
    if runner == "python" and "--runner" not in argv:
        argv += ["--runner", "python"]
    return shlex.join(argv)


def replay_command(result: ScenarioResult, failures: list[Failure],
                   device_args: list[str] | None) -> str | None:
    """`python -m harness replay ...` for a run with failures that kept its artifacts."""
    if not failures or result.artifacts is None:
        return None
    return command_line(result.artifacts, device_args, runner=result.output.runner)


def xnnpack_entry(load: CacheLoad, expected: str | None) -> dict[str, Any]:
    """One XNNPACK placement verdict a test made (harness.results.xnnpack.CacheLoad)."""
    return {"scenario": load.scenario, "module": load.module, "method": load.method,
            "cache_path": load.cache_path, "classification": load.classification,
            "expected": expected, "weight_bytes": load.weight_bytes,
            "heap_bytes": load.heap_bytes, "mapped_bytes": load.mapped_bytes,
            "steps": [load.before, load.after],
            # why, in the runtime's words (harness.results.xnnpack_log)
            "branch": load.branch or None, "errno": load.errno, "reason": load.reason or None,
            "loaded_entries": load.loaded_entries, "runtime_log": list(load.runtime_log)}


def qnn_api(result: ScenarioResult) -> dict[str, Any]:
    """The QNN API versions the library reported in the call trace (interposer's `api` line):
    {"core": "2.40.0", "backend": "5.51.0", "provider": ...}; {} without a trace."""
    for rec in result.trace:
        if rec.kind == "api":
            return dict(rec.fields)
    return {}


# Metrics over a test's runs ---------------------------------------------------------------------
def method_key(run: dict[str, Any], module: str | None, method: str | None) -> str:
    """`<model>.<method>` for a step of `module` (the model loaded under that module name)."""
    model = (run.get("modules") or {}).get(module or "", {}).get("model") or module or "?"
    return f"{model}.{method}"


def timed_steps(run: dict[str, Any]) -> Iterable[tuple[str, str, float]]:
    """(op, method key, elapsed_ms) of every load_method/execute that reported a time, the
    sub-steps of `parallel` steps included."""
    for step in run.get("steps", []):
        subs = step.get("substeps") if step.get("op") == "parallel" else [step]
        for sub in subs or []:
            if sub.get("op") in TIMED_OPS and isinstance(sub.get("elapsed_ms"), (int, float)):
                yield sub["op"], method_key(run, sub.get("module"), sub.get("method")), \
                    float(sub["elapsed_ms"])


def run_peaks(run: dict[str, Any]) -> dict[str, float | None]:
    """Peak over the run's steps of Rss, Pss, Anonymous (kB), dma-buf and DSP heap (bytes)."""
    peaks: dict[str, float | None] = {k: None for k in PEAK_FIELDS}
    for step in run.get("steps", []):
        memory = step.get("memory") or {}
        for key in PEAK_FIELDS:
            value, peak = memory.get(key), peaks[key]
            if isinstance(value, (int, float)) and (peak is None or value > peak):
                peaks[key] = value
    return peaks


def metrics_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What a test's runs measured: live counts after the last step of the last run, peak
    memory over every run, and per method the load/execute milliseconds (n, median, max)."""
    peaks: dict[str, float | None] = {k: None for k in PEAK_FIELDS}
    times: dict[str, dict[str, list[float]]] = {"load_method": {}, "execute": {}}
    for run in runs:
        for key, value in run_peaks(run).items():
            peak = peaks[key]
            if value is not None and (peak is None or value > peak):
                peaks[key] = value
        for op, key, ms in timed_steps(run):
            times[op].setdefault(key, []).append(ms)
    last = runs[-1]["steps"][-1]["live"] if runs and runs[-1].get("steps") else None
    return {
        "scenarios": len(runs),
        "failed_scenarios": sum(1 for r in runs if r.get("failures")),
        "live_end": last,
        "peak": peaks,
        "load_ms": {k: _summary(v) for k, v in sorted(times["load_method"].items())},
        "execute_ms": {k: _summary(v) for k, v in sorted(times["execute"].items())},
    }


def _summary(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "median": round(statistics.median(values), 3),
            "max": round(max(values), 3)}


def junit_properties(test: dict[str, Any]) -> list[tuple[str, str]]:
    """A test's entry as flat JUnit properties (name, value), names prefixed `hil.`."""
    props: list[tuple[str, str]] = []
    if test.get("known_issue"):
        props.append(("hil.known_issue", test["known_issue"]))
    if test.get("device"):
        props.append(("hil.device", test["device"]))
    metrics = test.get("metrics") or {}
    if not metrics.get("scenarios"):
        return props
    props.append(("hil.scenarios", str(metrics["scenarios"])))
    props.append(("hil.failed_scenarios", str(metrics["failed_scenarios"])))
    for kind, count in sorted((metrics.get("live_end") or {}).items()):
        props.append((f"hil.live_end.{kind}", str(count)))
    for key, value in (metrics.get("peak") or {}).items():
        if value is not None:
            props.append((f"hil.peak_{key}", str(value)))
    for family in ("load_ms", "execute_ms"):
        for method, summary in (metrics.get(family) or {}).items():
            props.append((f"hil.{family}.{method}.median", str(summary["median"])))
            props.append((f"hil.{family}.{method}.max", str(summary["max"])))
    for run in test.get("runs") or []:
        soak = run.get("soak")
        for series in ("rss_kb", "malloc_in_use_bytes"):
            fitted = (soak or {}).get(series)
            if fitted:
                props.append((f"hil.soak.{run['scenario']}.{series}_per_cycle",
                              f"{fitted['per_cycle']} (95 % {fitted['low']} .. "
                              f"{fitted['high']}) over {soak['cycles'] - soak['warmup']} cycles"))
    for verdict in test.get("xnnpack") or []:
        expected = f" (expected {verdict['expected']})" if verdict.get("expected") else ""
        why = (f"; branch {verdict['branch']}, errno {verdict.get('errno')}: {verdict['reason']}"
               if verdict.get("branch") else "")
        props.append((f"hil.xnnpack.{verdict['scenario']}.{verdict['module']}",
                      f"{verdict['classification']}{expected}: heap "
                      f"{verdict['heap_bytes'] / 2**20:.1f} MiB, mapped "
                      f"{verdict['mapped_bytes'] / 2**20:.1f} MiB of "
                      f"{verdict['weight_bytes'] / 2**20:.1f} MiB weights{why}"))
    for story in test.get("xnnpack_launches") or []:
        props.append((f"hil.xnnpack_launches.{story['name']}", story["text"]))
    return props


# The file ---------------------------------------------------------------------------------------
def load_results(path: str | Path) -> dict[str, Any]:
    """A results.json, checked for its schema name and for the types of every field a reader
    of it (`harness compare`) uses, so a hand-edited or foreign file is one error naming the
    field, not a traceback (a file of another schema is refused, naming it)."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    try:
        text = path.read_bytes().decode("utf-8")
        doc = json.loads(text)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such file (write one with pytest --hil-report DIR)") from None
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not JSON ({exc})") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema != SCHEMA:
        raise ResultsError(f"{path}: schema {schema!r}, expected {SCHEMA!r}")
    _check_fields(path, doc)
    checked: dict[str, Any] = doc  # a JSON object: its schema was read above
    return checked


def _check_fields(path: Path, doc: dict[str, Any]) -> None:
    """pydantic (already the configs' validator) checks the fields readers use; the rest of
    the document is free to grow."""
    import pydantic

    from harness.results.schema import ResultsDocument

    try:
        ResultsDocument.model_validate(doc)
    except pydantic.ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                    for e in exc.errors()[:5]]
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise ResultsError(f"{path}: schema {SCHEMA} but not its fields: "
                           f"{'; '.join(problems)}{more}") from None


def _cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"
