"""Runtime backend options of the QNN backend (`set_option` / `get_option` through
executorch::runtime's backend option interface, and the same keys as per-load options in
`load_module`'s LoadBackendOptionsMap): `qnn_runtime_log_level`, `qnn_runtime_htp_performance_mode`.

They live on the backend singleton, so a value set between loads must be what get_option
returns and what the next load uses: the log level shows in the runtime's own lines of the
step that initializes the delegate ("create QNN Logger with log_level N"). A value of the wrong
type must be refused, as XNNPACK refuses one for its workspace_sharing_mode (the control): an
accepted value that does nothing leaves a caller believing the option is on. The Python
runner's pybindings have no backend options: these tests need the native runner.
"""

import re

import pytest

from harness.results.assertions import assert_steps_ok, check_failed
from harness.scenario import Scenario
from harness.scenario.library import first_method

QNN = "QnnBackend"
LOG_LEVEL = "qnn_runtime_log_level"
PERF_MODE = "qnn_runtime_htp_performance_mode"
INFO = 3  # QnnExecuTorchLogLevel::kLogLevelInfo (the programs are built with kLogLevelError)
_LOGGER = re.compile(r"create QNN Logger with log_level (\d+)")


@pytest.fixture(autouse=True)
def _native_runner(hil_session):
    if hil_session.device_runner == "python":
        pytest.skip("the executorch pybindings expose no backend options (set_option, "
                    "get_option, LoadBackendOptionsMap): run with --runner native")


def logger_levels(step) -> list[int]:
    """The log levels the runtime created QNN loggers with during the step."""
    return [int(m.group(1)) for m in _LOGGER.finditer(step.log)]


def option_value(step):
    return (step.event or {}).get("option", {}).get("value")


@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_get_echoes_set_and_the_next_load_uses_it(hil_program, scenario_driver):
    method = first_method(hil_program)
    sc = Scenario("runtime_options_set_get").get_option(QNN, LOG_LEVEL).allow_error()
    sc.label("before_set")
    sc.set_option(QNN, LOG_LEVEL, INFO).get_option(QNN, LOG_LEVEL).label("log_level")
    sc.set_option(QNN, PERF_MODE, 2).get_option(QNN, PERF_MODE).label("perf_mode")
    sc.load_module("A", hil_program).execute("A", method).label("first_load")
    sc.destroy_module("A")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    # Nothing set yet: the backend says so rather than inventing a value.
    assert result.step("before_set").status == "error", result.summary()
    assert option_value(result.step("log_level")) == INFO, result.summary()
    assert option_value(result.step("perf_mode")) == 2, result.summary()
    levels = logger_levels(result.step("first_load"))
    assert levels == [INFO], (f"the load after set_option({LOG_LEVEL}={INFO}) created QNN "
                              f"loggers with levels {levels}:\n{result.step('first_load').log}")


@pytest.mark.parametrize("value", ["3", True], ids=["string", "bool"])
@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_a_wrongly_typed_value_is_refused(hil_program, scenario_driver, value):
    sc = Scenario("runtime_options_wrong_type").set_option(QNN, LOG_LEVEL, value).allow_error()
    sc.label("wrong_type").get_option(QNN, LOG_LEVEL).allow_error().label("after")
    result = scenario_driver.run(sc)
    step = result.step("wrong_type")
    if step.status == "ok":
        after = result.step("after")
        raise check_failed(
            result, f"scenario {result.scenario.name}: set_option({QNN}, {LOG_LEVEL}, "
            f"{value!r}) returned Error::Ok for a {type(value).__name__} where the key takes an "
            f"int; get_option after it: {after.status} "
            f"{(after.event or {}).get('message') or option_value(after)}",
            "a wrongly typed runtime option was accepted")


@pytest.mark.hil_programs("kv_cache_xnn", precisions=("fp32",), needs=("xnnpack",))
def test_control_xnnpack_refuses_a_wrongly_typed_value(hil_program, scenario_driver):
    sc = Scenario("runtime_options_xnnpack_wrong_type")
    sc.set_option("XnnpackBackend", "workspace_sharing_mode", "1").allow_error().label("string")
    sc.set_option("XnnpackBackend", "workspace_sharing_mode", 1).label("int")
    result = scenario_driver.run(sc)
    assert result.step("string").status == "error", result.summary()
    assert "InvalidArgument" in (result.step("string").event or {}).get("message", "")
    assert result.step("int").status == "ok", result.summary()


@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_a_per_load_option_takes_effect_at_that_load(hil_program, scenario_driver):
    """The same key as a per-load option (Module::load with a LoadBackendOptionsMap, which the
    runtime hands to the backend's init) in a process where no runtime option was set."""
    method = first_method(hil_program)
    sc = Scenario("runtime_options_per_load")
    sc.load_module("A", hil_program, backend_options={QNN: {LOG_LEVEL: INFO}})
    sc.execute("A", method).label("loaded").destroy_module("A")
    result = scenario_driver.run(sc)
    assert_steps_ok(result)
    levels = logger_levels(result.step("loaded"))
    if levels != [INFO]:
        raise check_failed(
            result, f"scenario {result.scenario.name}: a load with the per-load option "
            f"{QNN}.{LOG_LEVEL}={INFO} created QNN loggers with levels {levels} (the "
            f"program's own level); the runtime's lines of that step:\n"
            f"{result.step('loaded').log[-1500:]}",
            "a per-load QNN runtime option had no effect")
