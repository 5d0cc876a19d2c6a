"""S6: a delegate whose init fails must release every QNN handle it took, and the next load of
a good program must work.

The bad input is a real one: the program's QNN context binary with 2 KiB of its payload
damaged (found behind the QnnContextCustomProtocol magic 0x5678abcd), so the QNN library
itself refuses it during delegate init.
"""

import dataclasses

import pytest

from harness.programs.damage import damaged_context_binary, without_qnn_compile_spec
from harness.results.assertions import assert_completed, assert_steps_ok
from harness.scenario import Scenario
from harness.scenario.library import first_method


@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_s6_failed_init_releases_every_handle(hil_program, scenario_driver, tmp_path):
    good = hil_program
    method = first_method(good)
    bad_pte = tmp_path / "damaged-context.pte"
    bad_pte.write_bytes(damaged_context_binary(good.pte.read_bytes()))
    bad = dataclasses.replace(good, pte=bad_pte)
    sc = Scenario("s6_bad_context")
    sc.load_module("X", bad).execute("X", method).allow_error().label("failed_init")
    sc.snapshot().label("after_failed_init")
    sc.destroy_module("X").snapshot().label("after_destroy")
    sc.load_module("A", good).execute("A", method).label("good_executed")
    sc.destroy_module("A").snapshot().label("released")
    result = scenario_driver.run(sc)
    assert_completed(result)
    failed = result.step("failed_init")
    assert failed.status == "error", f"a damaged context binary was accepted:\n{result.summary()}"
    # The next load works: it executes (its outputs are judged last, with every step's).
    assert result.step("good_executed").status in ("ok", "mismatch"), \
        f"the next load of a good program failed:\n{result.summary()}"
    checked = ("after_failed_init", "after_destroy", "released")
    leaks = {sc.labels[c]: result.step(c).live for c in checked if not result.step(c).live.released}
    if leaks:
        init_end = failed.event["trace_offset"]
        created = [f"seq {r.seq} {r.kind} " + " ".join(f"{k}={v}" for k, v in r.fields.items())
                   for r in result.trace if r.offset <= init_end and r.kind.endswith("_create")]
        runtime = "\n".join("    " + l for l in result.output.stderr.splitlines()
                            if "rror" in l or "Fail" in l)
        raise AssertionError(
            f"scenario {sc.name}: after the failed init of X, QNN still holds handles: "
            + "; ".join(f"after step {i} {result.steps[i].step.describe()}: {live}"
                        for i, live in leaks.items())
            + "\nQNN objects created by the failed init (none freed since):\n    " + "\n    ".join(created)
            + f"\nruntime log:\n{runtime}\nsteps:\n{result.summary()}")
    assert_steps_ok(result)


@pytest.mark.hil_programs("linear_relu", needs=("qnn",))
def test_a_delegate_without_its_compile_spec_is_refused(hil_program, scenario_driver, tmp_path):
    """A QNN delegate whose compile specs hold no `qnn_compile_spec` (the key renamed, the
    program otherwise valid) must be refused with an error, and the next load must work."""
    good = hil_program
    method = first_method(good)
    bad_pte = tmp_path / "no-qnn-compile-spec.pte"
    bad_pte.write_bytes(without_qnn_compile_spec(good.pte.read_bytes()))
    bad = dataclasses.replace(good, pte=bad_pte)
    sc = Scenario("s6_no_compile_spec")
    sc.load_module("X", bad).execute("X", method).allow_error().label("failed_init")
    sc.destroy_module("X")
    sc.load_module("A", good).execute("A", method).label("good_executed")
    sc.destroy_module("A")
    result = scenario_driver.run(sc)
    assert_completed(result)
    assert result.step("failed_init").status == "error", \
        f"a QNN delegate without its compile spec was accepted:\n{result.summary()}"
    assert_steps_ok(result)
