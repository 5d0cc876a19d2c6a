"""Load/destroy soak: many load -> execute -> destroy cycles in one process, as an app that loads
and destroys models all day, with memory read after every cycle (no module live).

The growth per cycle of Rss and of malloc's bytes in use is fitted as a slope with its 95 %
interval (harness.results.soak, Theil-Sen over the cycles after the warm-up) and bounded by the
SoC config (`soak_rss_kb_per_cycle`, `soak_heap_bytes_per_cycle`); the fit goes to results.json
(`runs[].soak`) and the JUnit properties (`hil.soak.<scenario>.*`) whatever the verdict. Three
cycle shapes (harness.scenario.library.SOAK_SHAPES): one module, two modules of one program, and
one module loading and unloading each of its methods; the one-module cycle in every Module load
mode. XNNPACK programs run the same cycles as controls: the runtime holds their state, no QNN
manager is cached, so their growth is the runtime's and the harness's alone.

`--soak-cycles N` (default 16) sets the cycles; a night's run takes hundreds. A verdict is decided on the
interval: a leak only when its lower end is above the bound; when it straddles the bound the
soak runs again with twice the fitted cycles (twice at most), and one still straddling after
that is reported as undecided (skipped, with its fit), neither a pass nor a failure. The Python
runner's malloc count holds the interpreter's own tables too, which settle only after tens of
cycles: there a soak runs 24 warm-up cycles and fits 16 or more after them (soak_length).
"""

import pytest

from harness.protocol.scenario_file import DEFAULT_LOAD_MODE, LOAD_MODES
from harness.results.assertions import assert_soak_bounded, assert_steps_ok
from harness.results.soak import UNDECIDED, soak_length, soak_schedule, undecided
from harness.scenario.library import SOAK_SHAPES, soak

CONTROLS = ("kv_cache_xnn", "xnn_shared_weights")


def run_soak(hil_program, hil_session, scenario_driver, shape, load_mode=None):
    """Every step ok and the growth per cycle bounded. Handle isolation and live counts are
    the isolation suites' verdicts (two modules of one program share one cached context
    there: qnn-delegate-cache-module-lifetime); a soak judges memory."""
    cycles, warmup = soak_length(hil_session.device_runner, hil_session.options.soak_cycles)
    schedule = soak_schedule(cycles, warmup)
    for cycles in schedule:  # a fit whose interval straddles its bound runs again, longer
        sc = soak(hil_program, cycles, shape, load_mode,
                  name=f"soak_{shape}" + (f"_{load_mode}" if load_mode else ""))
        result = scenario_driver.run(sc)
        assert_steps_ok(result)
        fitted = assert_soak_bounded(result, *hil_session.soak_bounds, warmup=warmup)
        if fitted.verdict != UNDECIDED:
            return fitted
    pytest.skip(undecided(fitted, *hil_session.soak_bounds, runs=len(schedule)))


@pytest.mark.parametrize("load_mode", LOAD_MODES)
@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_soak_one_module_in_each_load_mode(hil_program, hil_session, scenario_driver, load_mode):
    if hil_session.device_runner == "python" and load_mode != DEFAULT_LOAD_MODE:
        pytest.skip(f"the Python runner's pybindings read a file only as {DEFAULT_LOAD_MODE}, "
                    f"not {load_mode}: run with --runner native")
    run_soak(hil_program, hil_session, scenario_driver, "one_module", load_mode)


@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_soak_two_modules_of_one_program(hil_program, hil_session, scenario_driver):
    run_soak(hil_program, hil_session, scenario_driver, "two_modules")


@pytest.mark.hil_programs("prefill_decode", needs=("qnn",))
def test_soak_unload_each_method(hil_program, hil_session, scenario_driver):
    run_soak(hil_program, hil_session, scenario_driver, "unload_methods")


@pytest.mark.parametrize("shape", SOAK_SHAPES)
@pytest.mark.hil_programs(*CONTROLS, precisions=("fp32",), needs=("xnnpack",))
def test_soak_control_xnnpack(hil_program, hil_session, scenario_driver, shape):
    """The same cycles on XNNPACK programs: no QNN state, so a bound these break is the
    harness's or the runtime's core, not the QNN delegate's."""
    run_soak(hil_program, hil_session, scenario_driver, shape)
