"""DSP heap readings (harness/qnn/dsp_heap.py, the interposer's `dsp_heap` trace lines): replay per
step, the bounds check and what a missing reading means, and which devices ask for them.

The readings themselves come from a phone's HTP; test_dsp_heap_chain.py runs the interposer
against the QNN C interface end to end."""

import json
from pathlib import Path, PurePosixPath

import pytest

from harness.qnn import dsp_heap
from harness.results.assertions import assert_dsp_heap_bounded
from harness.programs.compile import CompiledModel, MethodReference
from harness.devices.adb.identify import DeviceIdentity
from harness.devices.adb.payload import device_payload
from harness.devices.payload import Payload
from harness.qnn.trace import parse_trace, replay
from harness.protocol.output import RunOutput
from harness.results.run import ScenarioResult
from harness.results import step_memory
from harness.runner.select import DeviceBuild
from harness.scenario import Scenario

MIB = 2**20
BASE = 8 * MIB


def qnn_model(tmp_path: Path) -> CompiledModel:
    return CompiledModel("m", "qnn", "SM8650", "fp16", tmp_path / "m.pte",
                         {"forward": MethodReference((), ())}, 0, 0)


def dsp_lines(seq: int, op: str, ctx: str, before: int, after: int) -> list[str]:
    when = "created" if op == "create" else "freed"
    return [f"{seq} dsp_heap op={op} context={ctx} event=DSP:before_context_{when} bytes={before}",
            f"{seq + 1} dsp_heap op={op} context={ctx} event=DSP:after_context_{when} bytes={after}"]


def s4_like(tmp_path: Path, freed_to: int, context_mib: int = 2) -> ScenarioResult:
    """load, load_method, destroy, snapshot, as a phone traces it: one context of
    `context_mib` MiB, whose free brings the DSP heap to `freed_to` bytes."""
    model = qnn_model(tmp_path)
    sc = (Scenario("dsp").load_module("A", model).load_method("A", "forward")
          .destroy_module("A").snapshot())
    held = BASE + context_mib * MIB
    lines = (["1 api core=2.40.0", "2 backend_create rc=0 handle=0x1",
              "3 device_create rc=0 handle=0x1",
              "4 context_create rc=0 handle=0x1 backend=0x1 device=0x1 binary=49152"] +
             dsp_lines(5, "create", "0x1", BASE, held) +
             ["7 context_free rc=0 handle=0x1"] + dsp_lines(8, "free", "0x1", held, freed_to) +
             ["10 device_free rc=0 handle=0x1", "11 backend_free rc=0 handle=0x1"])
    text = "\n".join(lines) + "\n"
    trace = parse_trace(text)
    by_seq = {r.seq: r.offset for r in trace}
    offsets = [0, by_seq[6], by_seq[11], by_seq[11]]
    events = [("HARNESS_EVENT " + json.dumps({
        "event": "step", "index": i, "op": s.op, "status": "ok", "trace_offset": offsets[i],
        "memory": {"rollup": {"Rss": 1000}, "dmabuf": {"count": 0, "bytes": 0}}}))
        for i, s in enumerate(sc.steps)] + ['HARNESS_EVENT {"event": "end"}']
    return ScenarioResult.build(sc, RunOutput(0, "\n".join(events), ""), trace)


def test_readings_replay_with_live_contexts_and_per_step(tmp_path):
    result = s4_like(tmp_path, freed_to=BASE)
    state = replay(result.trace)
    assert [(r.op, r.event, r.bytes, r.live_contexts) for r in state.dsp] == [
        ("create", "DSP:before_context_created", BASE, 1),
        ("create", "DSP:after_context_created", BASE + 2 * MIB, 1),
        ("free", "DSP:before_context_freed", BASE + 2 * MIB, 0),
        ("free", "DSP:after_context_freed", BASE, 0)]
    # per step: nothing before the first context, then the latest figure
    assert [s.trace["dsp_heap"] for s in result.steps] == [None, BASE + 2 * MIB, BASE, BASE]
    assert [(step_memory(s) or {}).get("dsp_heap_bytes") for s in result.steps] == [
        None, BASE + 2 * MIB, BASE, BASE]


def test_a_clean_run_is_within_the_bounds(tmp_path):
    assert_dsp_heap_bounded(s4_like(tmp_path, freed_to=BASE), 4096, 256, expected=True)
    # a few kB of DSP bookkeeping under the tolerance is no leak
    assert_dsp_heap_bounded(s4_like(tmp_path, freed_to=BASE + 100 * 1024), 4096, 256, True)


def test_heap_kept_after_the_last_free_is_a_leak_named_at_its_step(tmp_path):
    result = s4_like(tmp_path, freed_to=BASE + MIB)
    with pytest.raises(AssertionError) as exc:
        assert_dsp_heap_bounded(result, 4096, 256, expected=True)
    text = str(exc.value)
    assert "step 2 destroy_module(A): DSP:after_context_freed" in text
    assert "1024 kB above the baseline (8388608 bytes) with no live context" in text
    assert "freed contexts kept DSP heap" in text


def test_a_context_larger_than_the_bound_fails(tmp_path):
    result = s4_like(tmp_path, freed_to=BASE, context_mib=6)
    with pytest.raises(AssertionError, match=r"step 1 load_method\(A.forward\): "
                                             r"DSP:after_context_created \+6144 kB with 1 live"):
        assert_dsp_heap_bounded(result, 4096, 256, expected=True)
    # "before_context_freed" still holds the context being freed: counted with it
    with pytest.raises(AssertionError) as exc:
        assert_dsp_heap_bounded(result, 4096, 256, expected=True)
    assert "DSP:before_context_freed +6144 kB with 1 live contexts" in str(exc.value)


def test_a_device_without_the_reading_checks_nothing(tmp_path):
    leaking = s4_like(tmp_path, freed_to=BASE + 64 * MIB)
    assert_dsp_heap_bounded(leaking, 4096, 256, expected=False)


def test_a_refusing_library_or_a_silent_one_fails_where_the_reading_is_expected(tmp_path):
    model = qnn_model(tmp_path)
    sc = Scenario("refused").load_module("A", model).load_method("A", "forward")
    for trace_text, words in (
            ("1 api core=2.40.0\n2 dsp_heap_unsupported rc=1000 op=create\n"
             "3 context_create rc=0 handle=0x2 backend=0x1 device=0x1 binary=1\n",
             "refused DSP memory profiling (error 1000 (QNN_COMMON_ERROR_NOT_SUPPORTED))"),
            ("1 api core=2.40.0\n2 context_create rc=0 handle=0x2 backend=0x1 device=0x1\n",
             "QNN contexts were created but no DSP heap reading was traced")):
        trace = parse_trace(trace_text)
        events = "\n".join('HARNESS_EVENT ' + json.dumps(
            {"event": "step", "index": i, "op": s.op, "status": "ok",
             "trace_offset": trace[-1].offset}) for i, s in enumerate(sc.steps))
        result = ScenarioResult.build(sc, RunOutput(0, events + '\nHARNESS_EVENT {"event": '
                                                    '"end"}', ""), trace)
        with pytest.raises(AssertionError, match=r"\(error 1000|no DSP heap") as exc:
            assert_dsp_heap_bounded(result, 4096, 256, expected=True)
        assert words in str(exc.value)
        assert_dsp_heap_bounded(result, 4096, 256, expected=False)


def test_which_devices_ask():
    assert dsp_heap.wanted("auto", android_htp=True)
    assert not dsp_heap.wanted("auto", android_htp=False)
    assert dsp_heap.wanted("on", android_htp=False)
    assert not dsp_heap.wanted("off", android_htp=True)
    with pytest.raises(Exception, match="--dsp-heap must be one of auto, on, off"):
        dsp_heap.wanted("yes", android_htp=True)


def _payload(tmp_path: Path, abi: str, setting: str) -> Payload:
    sdk = tmp_path / "qairt"
    for rel in ("lib/aarch64-android/libQnnHtp.so", "lib/aarch64-android/libQnnSystem.so",
                "lib/aarch64-android/libQnnHtpV75Stub.so",
                "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so", "sim/libQnnHtp.so",
                "sim/libQnnSystem.so", "build/harness-runner", "build/libQnnHtp.so"):
        (sdk / rel).parent.mkdir(parents=True, exist_ok=True)
        (sdk / rel).write_bytes(b"x")
    identity = DeviceIdentity("s", "SM8650", "ro.soc.model", abi, "14")
    build = DeviceBuild(abi, sdk / "build/harness-runner", sdk / "build/libQnnHtp.so", (),
                        ("QnnBackend", "XnnpackBackend"), "android" if abi != "x86_64" else "host")
    return device_payload(identity, build, 75, PurePosixPath("/data/local/tmp/ws"),
                              sdk_root=str(sdk), simulator_lib_dir=lambda: sdk / "sim",
                              dsp_heap_setting=setting)


def test_phones_ask_for_the_reading_and_stand_ins_do_not(tmp_path):
    phone = _payload(tmp_path, "arm64-v8a", "auto")
    assert phone.env[dsp_heap.ENV] == "1" and phone.dsp_heap
    assert phone.env["HARNESS_QNN_REAL_HTP"] == "/data/local/tmp/ws/qnn/libQnnHtp.so"
    assert phone.dsp_heap_note == dsp_heap.DEVICE_NOTE
    off = _payload(tmp_path, "arm64-v8a", "off")
    assert off.env[dsp_heap.ENV] == "0" and off.dsp_heap_note == dsp_heap.OFF_NOTE
    stand_in = _payload(tmp_path, "x86_64", "auto")
    assert not stand_in.dsp_heap and stand_in.dsp_heap_note == dsp_heap.STAND_IN_NOTE
    forced = _payload(tmp_path, "x86_64", "on")
    assert forced.dsp_heap and "--dsp-heap on" in forced.dsp_heap_note
