"""DSP heap readings end to end: the real runtime and the real interposer on the HTP simulator.

A phone's DSP heap cannot exist here. `dsp_heap_emulation.c` stands where a phone's
libQnnHtp.so would, over the simulator library: it accepts the DSP memory profiling config and
reports the DSP:... profile events a phone reports, through the QNN C interface only; so the
interposer's config injection, profile handling and tracing, the replay, the per-step figures
and the check are the code phones run. Against the real simulator library the same interposer
shows what the simulator really does: it refuses the config with NOT_SUPPORTED (1000).
"""

import dataclasses
from pathlib import Path

import pytest

from harness.qnn import dsp_heap
from harness.results.assertions import assert_dsp_heap_bounded, assert_live_counts, assert_steps_ok
from harness.devices.simulator import SimulatorDevice
from harness.drive.driver import ScenarioDriver
from harness.qnn.trace import replay
from harness.runner.select import choose_runner
from harness.scenario.library import s4_cleanup_reload

from dsp_emulation import build_emulation

pytest_plugins = ["pytester"]
BASE = 8 * 2**20


@pytest.fixture(scope="module")
def emulation_dir(tmp_path_factory) -> Path:
    """The emulation library, named libQnnHtp.so as the interposer's real library would be."""
    return build_emulation(tmp_path_factory.mktemp("dsp-emulation")).parent


@pytest.fixture
def phone_like(hil_session, emulation_dir, monkeypatch, tmp_path):
    """A simulator device whose QNN library reports DSP heap as a phone's does."""
    monkeypatch.setenv("DSP_EMULATION_REAL_HTP", str(hil_session.sdk.real_lib_dir / "libQnnHtp.so"))
    sdk = dataclasses.replace(hil_session.sdk, real_lib_dir=emulation_dir,
                              extra_lib_dirs=(hil_session.sdk.real_lib_dir,
                                              *hil_session.sdk.extra_lib_dirs))
    devices = []

    def make(leak_bytes: int = 0) -> ScenarioDriver:
        monkeypatch.setenv("DSP_EMULATION_LEAK_BYTES", str(leak_bytes))
        device = SimulatorDevice(sdk, hil_session.soc, choose_runner("native"),
                                 dsp_heap_setting="on")
        devices.append(device)
        return ScenarioDriver(device, tmp_path / f"leak-{leak_bytes}", 300)

    yield make
    for device in devices:
        device.close()


def test_readings_per_step_return_to_the_baseline(phone_like, compiled_model, hil_session):
    driver = phone_like()
    result = driver.run(s4_cleanup_reload(compiled_model("linear_relu"), 3))
    assert_steps_ok(result)
    assert_live_counts(result)
    state = replay(result.trace)
    # every create and free gave its two figures, each traced after its own call
    assert len(state.dsp) == 4 * 3, [r.event for r in state.dsp]
    assert state.dsp_unsupported is None
    for step in result.steps:
        if step.step.op == "snapshot":
            assert step.live["context"] == 0 and step.trace["dsp_heap"] == BASE, result.summary()
        elif step.step.op == "load_method":
            assert step.trace["dsp_heap"] > BASE + 2**20, step.trace
    per_context_kb, leak_kb, expected = hil_session.dsp_heap
    assert not expected  # the session's own device is the simulator
    assert_dsp_heap_bounded(result, per_context_kb, leak_kb, driver.device.dsp_heap)


def test_a_dsp_that_keeps_heap_after_a_free_fails_the_check(phone_like, compiled_model,
                                                            hil_session):
    driver = phone_like(leak_bytes=512 * 1024)  # of each freed context's 1 MiB + binary
    result = driver.run(s4_cleanup_reload(compiled_model("linear_relu"), 3))
    assert_steps_ok(result)
    assert_live_counts(result)  # the handles are all freed: only the DSP heap tells
    per_context_kb, leak_kb, _ = hil_session.dsp_heap
    with pytest.raises(AssertionError) as exc:
        assert_dsp_heap_bounded(result, per_context_kb, leak_kb, True)
    text = str(exc.value)
    assert "destroy_module(A): DSP:after_context_freed" in text
    assert "512 kB above the baseline (8388608 bytes) with no live context" in text
    assert "1024 kB above" in text and "1536 kB above" in text  # it grows every cycle


def test_the_simulator_refuses_the_reading_and_runs_on(hil_session, compiled_model, tmp_path):
    """Asked on the real simulator (--dsp-heap on), the library answers NOT_SUPPORTED; the
    interposer asks again without the config, once, so the scenario itself runs as usual."""
    device = SimulatorDevice(hil_session.sdk, hil_session.soc, choose_runner("native"),
                             dsp_heap_setting="on")
    try:
        result = ScenarioDriver(device, tmp_path, 300).run(
            s4_cleanup_reload(compiled_model("linear_relu"), 2))
    finally:
        device.close()
    assert_steps_ok(result)
    assert_live_counts(result)
    kinds = [r.kind for r in result.trace]
    assert kinds.count("dsp_heap_unsupported") == 1 and "dsp_heap" not in kinds
    assert next(r for r in result.trace if r.kind == "dsp_heap_unsupported").rc == 1000
    with pytest.raises(AssertionError, match=r"refused DSP memory profiling \(error 1000 "
                                             r"\(QNN_COMMON_ERROR_NOT_SUPPORTED\)\)"):
        assert_dsp_heap_bounded(result, 32768, 256, device.dsp_heap)


def test_by_default_the_simulator_does_not_ask(hil_session, compiled_model, tmp_path):
    device = hil_session.device
    assert device.dsp_heap is False and device.dsp_heap_note == dsp_heap.SIMULATOR_NOTE
    result = ScenarioDriver(device, tmp_path, 300).run(
        s4_cleanup_reload(compiled_model("linear_relu"), 1))
    assert_steps_ok(result)
    assert not any(r.kind.startswith("dsp_heap") for r in result.trace)
    assert_dsp_heap_bounded(result, *hil_session.dsp_heap)  # nothing to check, and no failure


def test_dsp_heap_on_the_simulator_fails_s4_with_the_libraries_words(pytester):
    """What a user sees who asks for the reading where it does not exist."""
    suite = Path(__file__).resolve().parents[1] / "hil" / "test_isolation.py"
    result = pytester.runpytest_subprocess(str(suite), "-k", "s4 and fp16", "--dsp-heap=on",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*refused DSP memory profiling (error 1000 "
                                 "(QNN_COMMON_ERROR_NOT_SUPPORTED))*--dsp-heap off*"])
