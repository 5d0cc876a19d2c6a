"""The native and the Python runner give the same event stream for the same scenario.

Compared step by step: status, error code class, live QNN counts from the trace, and the
outputs' digests. The scenario includes the 1.5.1 isolation failure, so error paths are
compared too, not only the happy path.
"""

import pytest

from harness.devices.simulator import SimulatorDevice
from harness.driver import ScenarioDriver
from harness.scenario import Scenario


@pytest.fixture
def both_runners(hil_session, tmp_path):
    if hil_session.runner_for("native").kind != "native":
        pytest.fail(f"native runner unavailable: {hil_session.notices}")
    device = SimulatorDevice(hil_session.sdk, hil_session.soc, hil_session.runner_for)
    return {kind: ScenarioDriver(device, tmp_path / kind, 300, kind) for kind in ("native", "python")}


def test_same_events_from_both_runners(both_runners, compiled_model):
    one = compiled_model("linear_relu")
    two = compiled_model("prefill_decode")
    sc = Scenario("parity")
    sc.load_module("A", one).load_module("B", one).execute("A", "forward").execute("B", "forward")
    sc.destroy_module("A").execute("B", "forward").destroy_module("B")
    sc.load_module("M", two).load_method("M", "prefill").load_method("M", "decode")
    sc.execute("M", "decode").unload_method("M", "prefill").execute("M", "decode")
    sc.unload_method("M", "prefill")  # not loaded: a harness-side error in both runners
    sc.destroy_module("M").snapshot()
    results = {kind: driver.run(sc) for kind, driver in both_runners.items()}
    native, python = results["native"], results["python"]
    assert native.output.runner == "native" and python.output.runner == "python"
    for i, (n, p) in enumerate(zip(native.steps, python.steps)):
        where = f"step {i} {n.step.describe()}"
        assert n.status == p.status, f"{where}: native {n.describe()} vs python {p.describe()}"
        assert (n.event["error_code"] == 0) == (p.event["error_code"] == 0), where
        assert n.live == p.live, f"{where}: native {n.live} vs python {p.live}"
        assert [o["sha256"] for o in n.event["outputs"]] == [o["sha256"] for o in p.event["outputs"]], where
    statuses = [s.status for s in native.steps]
    assert "error" in statuses and statuses.count("ok") >= 10
    assert native.output.returncode == python.output.returncode == 1
