"""One point of the fault sweep run on a device, for the tests that hold a device kind's verdict
to the simulator's (the adb loopback phone, the ssh board): the lifecycle scenario of
tests/hil/test_fault_sweep.py recorded with nothing injected, then run with the first call of
one QNN function failing, judged as the sweep judges it (harness.drive.fault_sweep)."""

from __future__ import annotations

import dataclasses

from harness.drive import fault_sweep
from harness.results.assertions import assert_steps_ok
from harness.scenario import Scenario


@dataclasses.dataclass(frozen=True)
class Verdict:
    sites: tuple[tuple[str, int, int], ...]  # (function, occurrence, step) of each call of it
    statuses: tuple[str, ...]  # each step's status in the injected run
    failures: tuple[str, ...]  # what the sweep's judge found wrong in it
    injected: tuple[str, ...]  # the trace lines of the injected failure (nemesis_fail)


def sweep_point(driver, model, api: str) -> Verdict:
    """The sweep's verdict on the first `api` call of a load, execute, destroy of `model` (and
    the sweep's reload); AssertionError when the run with nothing injected makes no such call
    (the device does not trace it)."""
    model = fault_sweep.unjudged(model)
    base = (Scenario(f"sweep_point_{api.lower()}").load_module("A", model)
            .load_method("A", "forward").execute("A", "forward").destroy_module("A").snapshot())
    full = fault_sweep.judged_against_baseline(fault_sweep.with_reload(base, model, "forward"))
    record = driver.run(full)
    assert_steps_ok(record)
    every = fault_sweep.call_sites(record, len(base.steps))
    sites = [s for s in every if s.api == api]
    assert sites, (f"the run with nothing injected traced no {api} call; it traced "
                   f"{sorted({s.api for s in every})}")
    result = driver.run(fault_sweep.injected(full, sites[0], len(base.steps)), allow_crash=True)
    injected = tuple(" ".join([r.kind, *(f"{k}={v}" for k, v in r.fields.items())])
                     for r in result.trace if r.kind == "nemesis_fail")
    return Verdict(tuple((s.api, s.n, s.step) for s in sites),
                   tuple(s.status for s in result.steps),
                   tuple(f.describe() for f in fault_sweep.judge(result, sites[0], record)),
                   injected)
