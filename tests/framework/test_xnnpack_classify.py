"""harness.results.xnnpack on synthetic runner events: classification, assertions, runtime counters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results import xnnpack
from harness.programs.compile import CompiledModel, MethodReference
from harness.protocol.output import RunOutput
from harness.results.run import ScenarioResult
from harness.protocol.wire import EVENT_PREFIX
from harness.scenario import Scenario
from harness.protocol.tensors import TensorFile
from harness.results.xnnpack import (COUNTER_KEYS, add_counter_probes, assert_cache_steps_ok,
                             assert_counters_agree, assert_fallback, assert_no_fallback,
                             cache_options, check_counters, classify, classify_load,
                             find_mapping, note_counters, read_counters)

MIB_KB = 1024  # kB per MiB, the unit of smaps readings
W = 32 * 1024 * 1024  # weight bytes of the synthetic model
CACHE = "/data/local/tmp/ws/scratch/t/x.cache"


def model(tmp_path: Path) -> CompiledModel:
    ref = MethodReference((TensorFile("float32", (1, 4), tmp_path / "in.bin"),),
                          (TensorFile("float32", (1, 4), tmp_path / "out.bin"),))
    return CompiledModel("stack", "xnnpack", "SM8650", "fp32", tmp_path / "m.pte",
                         {"forward": ref}, 1e-3, 1e-3)


def memory(anon_mib: float, file_mib: float = 5, cache_mib: float = 0,
           cache_key: str = CACHE) -> dict:
    anon, cache = int(anon_mib * MIB_KB), int(cache_mib * MIB_KB)
    rss = anon + int(file_mib * MIB_KB) + cache
    return {"rollup": {"Rss": rss, "Anonymous": anon, "Private_Dirty": anon + 4},
            "mappings": {cache_key: {"Rss": cache, "Private_Clean": cache}},
            "dmabuf": {"count": 0, "bytes": 0}}


def result_of(scenario: Scenario, readings: list[dict], statuses: dict[int, str] | None = None,
              options: dict[int, dict] | None = None, stderr: str = "",
              returncode: int = 0) -> ScenarioResult:
    """A ScenarioResult as a runner would report `scenario`, step i measuring readings[i]."""
    lines = [EVENT_PREFIX + json.dumps({"event": "start", "runner": "native", "pid": 1})]
    for i, step in enumerate(scenario.steps):
        if i >= len(readings):
            break
        status = (statuses or {}).get(i, "ok")
        lines.append(EVENT_PREFIX + json.dumps({
            "event": "step", "index": i, "op": step.op, "module": step.module,
            "method": step.method, "status": status, "error_code": 0 if status == "ok" else 1,
            "message": "" if status == "ok" else f"{status} in step {i}", "elapsed_ms": 1.0,
            "outputs": [{"dtype": "float32", "shape": [1, 4], "sha256": "ab"}]
            if step.op == "execute" else [],
            "max_abs_diff": 0.5 if status == "mismatch" else 0.0,
            "option": (options or {}).get(i), "trace_offset": 0, "memory": readings[i]}))
    if len(readings) >= len(scenario.steps):  # the runner finished
        lines.append(EVENT_PREFIX + json.dumps({"event": "end"}))
    output = RunOutput(returncode, "\n".join(lines) + "\n", stderr, runner="native")
    return ScenarioResult.build(scenario, output, [])


def launch(tmp_path: Path, cache: str | None = CACHE, modules=("A",)) -> Scenario:
    sc = Scenario("x1")
    if cache:
        sc.watch_mappings.append(cache)
    sc.snapshot()
    for m in modules:
        sc.load_module(m, model(tmp_path), backend_options=cache_options(cache))
        sc.execute(m, "forward")
    return sc


# Classification -------------------------------------------------------------------------------
@pytest.mark.parametrize("heap,mapped,expected", [
    (0.003 * W, W, "mapped"),
    (0.09 * W, 0.95 * W, "mapped"),
    (0.11 * W, W, "fallback"),  # a partial cache: some packs on the heap
    (1.0 * W, 0, "fallback"),
    (0, 0.5 * W, "inconclusive"),  # neither: nothing packed where we looked
])
def test_classify_thresholds(heap, mapped, expected):
    assert classify(int(heap), int(mapped), W) == expected


def test_classify_rejects_zero_weights():
    with pytest.raises(ValueError):
        classify(0, 0, 0)


def test_warm_load_is_mapped(tmp_path):
    sc = launch(tmp_path)
    result = result_of(sc, [memory(0.4), memory(0.41), memory(0.5, 6, 32.0)])
    load = assert_no_fallback(result, W)
    assert load.classification == "mapped" and load.module == "A" and load.method == "forward"
    assert load.heap_bytes == (int(0.5 * MIB_KB) - int(0.4 * MIB_KB)) * 1024
    assert load.mapped_bytes == 32 * 1024 * 1024 and load.cache_path == CACHE
    assert (load.before, load.after) == (0, 2)


def test_fallback_reports_heap_bytes_and_fails_no_fallback(tmp_path):
    sc = launch(tmp_path)
    result = result_of(sc, [memory(0.4), memory(0.41), memory(32.5, 6, 0.0)],
                       stderr="E 00:00 executorch:XNNWeightsCache.cpp:86] open(/x/y) failed "
                              "(errno=20)\nI unrelated line\n")
    load = assert_fallback(result, W)
    assert load.heap_bytes == (int(32.5 * MIB_KB) - int(0.4 * MIB_KB)) * 1024
    assert load.errnos == [20] and len(load.runtime_log) == 1
    with pytest.raises(AssertionError) as info:
        assert_no_fallback(result, W)
    text = str(info.value)
    assert "fallback" in text and "heap +32.1 MiB" in text and "errno=20" in text
    assert "cache_rss" in text  # the per-step memory table


def test_assert_fallback_needs_most_weights_on_heap(tmp_path):
    sc = launch(tmp_path)
    partial = result_of(sc, [memory(0.4), memory(0.4), memory(16.4, 6, 16.0)])
    assert classify_load(partial, W).classification == "fallback"
    with pytest.raises(AssertionError, match="expected a heap fallback"):
        assert_fallback(partial, W)  # half on heap: < 80 %
    assert assert_fallback(partial, W, min_heap=0.4).heap_bytes == 16 * 1024 * 1024


def test_no_cache_load_has_no_cache_path(tmp_path):
    sc = launch(tmp_path, cache=None)
    assert sc.steps[1].args["backend_options"] == {"XnnpackBackend": {"weight_cache_enabled": False}}
    result = result_of(sc, [memory(0.4), memory(0.4), memory(32.4)])
    load = assert_fallback(result, W)
    assert load.cache_path is None and load.mapped_bytes == 0
    assert "no cache requested" in load.describe()


def test_second_module_is_measured_from_its_own_load(tmp_path):
    sc = launch(tmp_path, modules=("A", "B"))
    readings = [memory(0.4), memory(0.4), memory(0.5, 6, 32), memory(0.5, 6, 32),
                memory(0.52, 6, 32)]
    result = result_of(sc, readings)
    b = assert_no_fallback(result, W, "B")
    assert (b.before, b.after) == (2, 4) and b.heap_bytes < 0.1 * MIB_KB * 1024


def test_relative_cache_path_matches_the_runner_key(tmp_path):
    """adb scratch paths are relative to the run directory; runners report absolute keys."""
    rel = "../../scratch/t/x.cache"
    sc = launch(tmp_path, cache=rel)
    result = result_of(sc, [memory(0.4), memory(0.4), memory(0.5, 6, 32.0)])
    assert assert_no_fallback(result, W).mapped_bytes == 32 * 1024 * 1024


def test_find_mapping_spellings():
    maps = {"/a/scratch/t/x.cache": {"Rss": 1}, "/a/scratch/u/x.cache": {"Rss": 2}}
    assert find_mapping(maps, "/a/scratch/t/x.cache") == {"Rss": 1}
    assert find_mapping(maps, "/a/./scratch/u/../t/x.cache") == {"Rss": 1}
    assert find_mapping(maps, "../../scratch/u/x.cache") == {"Rss": 2}
    assert find_mapping(maps, "x.cache") is None  # ambiguous tail
    assert find_mapping(maps, "/b/x.cache") is None
    assert find_mapping({"/w/runs/1/./../../scratch/t/x.cache": {"Rss": 3}},
                        "../../scratch/t/x.cache") == {"Rss": 3}


def test_classify_load_needs_a_baseline_and_an_execute(tmp_path):
    sc = Scenario("x1").load_module("A", model(tmp_path)).execute("A", "forward")
    with pytest.raises(AssertionError, match="put a snapshot before it"):
        classify_load(result_of(sc, [memory(1), memory(1)]), W)
    sc = Scenario("x1").snapshot().load_module("A", model(tmp_path))
    with pytest.raises(AssertionError, match="never executed"):
        classify_load(result_of(sc, [memory(1), memory(1)]), W)
    sc = launch(tmp_path)
    with pytest.raises(AssertionError, match="never reported"):
        classify_load(result_of(sc, [memory(1), memory(1)], returncode=-11), W)


# Step checks ----------------------------------------------------------------------------------
def test_wrong_outputs_are_called_out(tmp_path):
    sc = launch(tmp_path)
    result = result_of(sc, [memory(1), memory(1), memory(1)], statuses={2: "mismatch"},
                       returncode=1)
    with pytest.raises(AssertionError, match="WRONG OUTPUTS") as info:
        assert_cache_steps_ok(result)
    assert "max_abs_diff 0.5" in str(info.value)


def test_get_option_errors_do_not_fail_the_steps_check(tmp_path):
    sc = add_counter_probes(launch(tmp_path), ("packed_cache_state",))
    result = result_of(sc, [memory(1)] * 5, statuses={3: "error"}, returncode=1)
    assert_cache_steps_ok(result)


# Runtime counters -----------------------------------------------------------------------------
def probes(tmp_path, answers: dict[str, tuple]) -> ScenarioResult:
    """answers: key -> ((probe status, probe value), (int status, int value))."""
    sc = add_counter_probes(launch(tmp_path), tuple(answers))
    options, statuses = {}, {}
    for i, step in enumerate(sc.steps):
        if step.op != "get_option":
            continue
        key, typ = step.args["key"], step.args["type"]
        status, value = answers[key][0 if typ == "string" else 1]
        statuses[i] = status
        options[i] = {"backend": "XnnpackBackend", "key": key, "value": value,
                      "supported": status == "ok"}
    readings = [memory(0.4), memory(0.4)] + [memory(0.5, 6, 32)] * (len(sc.steps) - 2)
    return result_of(sc, readings, statuses, options)


def test_counters_not_exposed_when_the_value_is_left_untouched(tmp_path):
    """1.5.1: get_option of an unknown key returns Ok and leaves the caller's value alone."""
    result = probes(tmp_path, {k: (("ok", ""), ("ok", 0)) for k in COUNTER_KEYS})
    counters = read_counters(result)
    assert not counters.exposed and counters.missing == COUNTER_KEYS
    assert "untouched" in counters.evidence["packed_cache_state"]


def test_counters_exposed_and_checked(tmp_path):
    result = probes(tmp_path, {
        "packed_cache_state": (("ok", "mapped"), ("ok", 1)),
        "packed_cache_heap_mib": (("ok", 0), ("ok", 0)),
        "packed_cache_mapped_mib": (("error", None), ("ok", 32)),  # strict about types
        "packed_cache_errno": (("error", None), ("error", None)),  # strict, unknown key
    })
    counters = read_counters(result)
    assert counters.values == {"packed_cache_state": "mapped", "packed_cache_heap_mib": 0,
                               "packed_cache_mapped_mib": 32}
    assert counters.missing == ("packed_cache_errno",)
    load = classify_load(result, W)
    assert_counters_agree(counters, load)


def test_counters_disagreeing_with_memory_fail(tmp_path):
    result = probes(tmp_path, {"packed_cache_state": (("ok", "off"), ("ok", 0)),
                               "packed_cache_heap_mib": (("ok", 0), ("ok", 0)),
                               "packed_cache_mapped_mib": (("ok", 0), ("ok", 0)),
                               "packed_cache_file_mib": (("ok", 1), ("ok", 1))})
    counters = read_counters(result)
    load = classify_load(result, W)  # measured: mapped, 32 MiB in the cache file
    problems = check_counters(counters, load, file_bytes=W + 1236)
    assert any("packed_cache_mapped_mib=0" in p for p in problems)
    assert any("packed_cache_state='off'" in p for p in problems)  # off, with a cache asked
    assert any("packed_cache_file_mib=1 but the file has 32.0 MiB" in p for p in problems)
    with pytest.raises(AssertionError, match="disagree with measured memory"):
        assert_counters_agree(counters, load)


def test_a_fallback_needs_a_heap_reason_and_a_partial_cache_stays_in_use(tmp_path):
    """The PR's state only says off or in use: a partial cache (half on heap) answering
    "file_backed" is right; its heap bytes need a heap reason."""
    sc = add_counter_probes(launch(tmp_path), ("packed_cache_state", "packed_cache_heap_reason",
                                               "packed_cache_heap_mib"))
    readings = [memory(0.4), memory(0.4), memory(16.4, 6, 16.0)] + [memory(16.4, 6, 16.0)] * 6
    options = {3: {"value": "file_backed"}, 4: {"value": 1}, 5: {"value": "none"}, 6: {"value": 0},
               7: {"value": "16"}, 8: {"value": 16}}
    result = result_of(sc, readings, options=options)
    counters = read_counters(result)
    load = classify_load(result, W)
    problems = check_counters(counters, load)
    assert not any("packed_cache_state" in p for p in problems), problems
    assert any(p.startswith("packed_cache_heap_reason=") for p in problems), problems


def test_note_counters_is_one_keyed_notice_per_process_and_writes_artifacts(tmp_path,
                                                                           monkeypatch, caplog):
    """1.5.1 publishes no counters: one notice (a log record the session gathers, keyed by the
    runtime version so an xdist controller keeps one for all workers), not a pytest warning
    under every test."""
    import logging
    import warnings

    from harness.log import NOTICE_KEY_ATTR

    monkeypatch.setattr(xnnpack, "_said", set())
    # A logger of its own that does not propagate: the notice of this made-up runtime must not
    # reach the session running this test (its summary would name "executorch 9.9").
    isolated = logging.getLogger("harness.test.counters-notice")
    monkeypatch.setattr(isolated, "propagate", False)
    isolated.addHandler(caplog.handler)
    monkeypatch.setattr(xnnpack, "_log", isolated)
    result = probes(tmp_path, {k: (("ok", ""), ("ok", 0)) for k in COUNTER_KEYS})
    counters = read_counters(result)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        note_counters(counters, "9.9", tmp_path / "a1")
        note_counters(counters, "9.9", tmp_path / "a2")
    assert caught == []
    said = [r for r in caplog.records if "publishes no packed-cache counters" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert getattr(said[0], NOTICE_KEY_ATTR) == xnnpack.counters_notice_key("9.9")
    saved = json.loads((tmp_path / "a2" / "xnnpack_counters.json").read_text())
    assert saved["executorch"] == "9.9" and saved["values"] == {}
    isolated.removeHandler(caplog.handler)
