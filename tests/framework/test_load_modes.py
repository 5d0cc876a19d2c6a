"""`load_mode` of load_module in both runners on the simulator: the native runner loads in each
of Module's four modes; the Python runner's pybindings read a file only as
MmapUseMlockIgnoreErrors and say so for the others, naming the runner that can."""

import pytest

from harness.protocol.scenario_file import LOAD_MODES
from harness.runner.select import choose_runner
from harness.scenario import Scenario
from harness.drive.driver import ScenarioDriver


@pytest.mark.parametrize("runner", ("native", "python"))
def test_both_runners_load_in_each_mode_or_say_why_not(hil_session, simulator_device, runner,
                                                       tmp_path):
    program = hil_session.model("kv_cache_xnn", "fp32")
    sc = Scenario("modes")
    for mode in LOAD_MODES:
        sc.load_module("A", program, load_mode=mode).execute("A", "forward").destroy_module("A")
    choice = choose_runner(runner)
    assert choice.kind == runner, choice.notice
    result = ScenarioDriver(simulator_device(choice), tmp_path, 300).run(sc)
    assert result.completed, result.crash_report()
    loads = [s for s in result.steps if s.step.op == "load_module"]
    if runner == "native":
        assert [s.status for s in result.steps] == ["ok"] * len(result.steps), result.summary()
    else:  # the pybindings read a file only as MmapUseMlockIgnoreErrors
        assert [s.status for s in loads] == ["error", "error", "error", "ok"], result.summary()
        assert "use the native runner" in loads[0].event["message"]
    assert all(s.memory.get("heap", {}).get("in_use", 0) > 0 for s in result.steps)
