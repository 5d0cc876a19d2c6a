"""One log: the harness's notices go through the `harness` logger, so caplog and
--log-cli-level see them, and each session's header gathers its own."""

from __future__ import annotations

import logging

from harness.session import HilSession

from adb_options import adb_options


def test_a_notice_is_a_log_record_and_a_line_of_its_own_session(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="harness")
    one = HilSession(adb_options(tmp_path / "1", "serial-1"))
    two = HilSession(adb_options(tmp_path / "2", "serial-2"))
    try:
        one.notice("the runner fell back to processes")
        one.notice("the runner fell back to processes")  # said twice, shown once
        two.notice("lease taken over")
    finally:
        one.close()
        two.close()
    assert one.notices == ["the runner fell back to processes"]
    assert two.notices == ["lease taken over"]
    records = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert ("harness.session", "WARNING", "lease taken over") in records
    # A closed session gathers no more.
    one.notice("after close")
    assert one.notices == ["the runner fell back to processes"]
    assert "after close" in caplog.text


def test_farm_events_are_logged(caplog):
    from harness.devices.farm import LabgridFarm

    caplog.set_level(logging.INFO, logger="harness")
    farm = LabgridFarm.__new__(LabgridFarm)  # the event log needs no coordinator
    farm.events = []
    farm.event("acquired place-1 (phone R5CX)")
    assert farm.events == ["acquired place-1 (phone R5CX)"]
    assert ("harness.devices.farm", "acquired place-1 (phone R5CX)") in [
        (r.name, r.getMessage()) for r in caplog.records]


def test_interrupts_during_a_cleanup_are_deferred_and_a_third_abandons_it(capfd):
    import os
    import signal

    import pytest

    from harness.log import ABANDON_AFTER, interrupts_deferred

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    done = []
    with interrupts_deferred("removing the workspace"):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("finished")
    assert done == ["finished"]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    err = capfd.readouterr().err
    assert err.count("interrupted during the cleanup") == 1 and "removing the workspace" in err
    abandoned = pytest.raises(KeyboardInterrupt, match="cleanup abandoned")
    with abandoned, interrupts_deferred("removing the workspace"):
        for _ in range(ABANDON_AFTER):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) == before[0]


def test_a_workers_notices_are_kept_once_by_the_controller(tmp_path):
    """What an xdist worker hands the controller (keyed_notices) is added there each once: the
    same text from two workers, and a full disk once per filesystem whatever directory two
    workers named."""
    worker = HilSession(adb_options(tmp_path / "w", "serial-w"))
    controller = HilSession(adb_options(tmp_path / "c", "serial-c"))
    try:
        worker.notice("compile cache entry X is damaged: rebuilding")
        handed = worker.keyed_notices
        assert handed == {"compile cache entry X is damaged: rebuilding":
                          "compile cache entry X is damaged: rebuilding"}
        controller.add_notices(handed)
        controller.add_notices(handed)  # a second worker said the same
        controller.add_notices({"disk-full:42": "/full/run-a: No space left on device"})
        controller.add_notices({"disk-full:42": "/full/run-b: No space left on device"})
        assert controller.notices == ["compile cache entry X is damaged: rebuilding",
                                      "/full/run-a: No space left on device"]
    finally:
        worker.close()
        controller.close()
