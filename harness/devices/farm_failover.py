"""A worker's places on a labgrid farm (`--lg-place-tags`): reserve a place whose phone opens
and passes preflight, and when that phone drops off for good, retire the place and go on with
another, so one dead phone costs the test it was running and not the rest of the worker's run.

The farm itself (reserving, tagging, releasing places on the coordinator) is
harness/devices/farm.py; the device the session's fixtures hold across a switch is
harness/devices/farm_device.py.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.devices.base import Device
from harness.devices.farm import LabgridFarm, Lease
from harness.devices.farm_device import FarmDevice
from harness.devices.kinds import OpenContext, kind_for
from harness.errors import DeviceError, HarnessError


class FarmFailover:
    """The places one worker holds, in turn. `open_context(lease)` is what a device kind opens
    the place's phone with; `notice` says what happened in the session's header and summary."""

    def __init__(self, coordinator: str, tags: dict[str, str], worker: str,
                 notice: Callable[[str], None],
                 open_context: Callable[[Lease], OpenContext]) -> None:
        self.farm = LabgridFarm(coordinator, tags, notice=notice)
        self.worker = worker
        self._open_context = open_context
        self._error: HarnessError | None = None  # no other place could be had: every later test
        self._events_sent = 0  # events already handed to a test report

    def lease_device(self) -> FarmDevice:
        """Reserve places by tags until one's phone opens and passes preflight. A place whose
        phone is not online or fails preflight is retired (tagged unhealthy, released) and the
        next one is reserved; an error of this host's own set-up (the phone is online, the
        set-up failed anyway) releases the place and is raised."""
        return FarmDevice(*self._lease())

    def _lease(self) -> tuple[Lease, Device]:
        while True:
            lease = self.farm.lease()
            kind, context = kind_for(lease.serial), self._open_context(lease)
            try:
                device = kind.open(lease.serial, context)
            except HarnessError as exc:
                if not kind.online(lease.serial, context):
                    self.farm.retire(lease, "unavailable", str(exc).splitlines()[0])
                    continue
                self.farm.release(lease)
                raise
            try:
                problems = device.preflight()
            except HarnessError as exc:
                problems = [str(exc).splitlines()[0]]
            if problems:
                device.close()
                self.farm.retire(lease, "preflight", "; ".join(problems))
                continue
            device.info.details["place"] = lease.place
            return lease, device

    def fail_over(self, farm_device: FarmDevice) -> bool:
        """Before a test: if the phone dropped off for good (it did not come back within the
        re-acquire window), retire its place and switch `farm_device` to another place's phone.
        True when the new phone has another SoC (what was compiled for the old one is stale).
        Once no other place can be had, raises the same error for every later test."""
        if self._error is not None:
            raise self._error
        if not farm_device.current.lost:
            return False
        old, soc = farm_device.lease, farm_device.info.soc
        self.farm.retire(old, "offline", farm_device.current.lost)
        farm_device.current.close()
        try:
            lease, device = self._lease()
        except HarnessError as exc:
            self._error = DeviceError(
                f"{old.label} dropped off for good and no other place could be had: {exc}")
            raise self._error from None
        farm_device.switch(lease, device)
        self.farm.event(f"{old.label} dropped off for good; the remaining tests run on "
                        f"{lease.label}")
        return device.info.soc != soc

    def label(self, farm_device: FarmDevice | None) -> str | None:
        """The place and serial tests run on now."""
        if self._error is not None:
            return "no place (failover failed)"
        return farm_device.lease.label if farm_device is not None else None

    def new_events(self) -> list[str]:
        """What happened to places since the last call (for the controller's summary)."""
        events = self.farm.events[self._events_sent:]
        self._events_sent += len(events)
        return self._lines(events)

    def summary(self) -> list[str]:
        """Every event of the worker's places, for its session summary."""
        return self._lines(self.farm.events)

    def _lines(self, events: list[str]) -> list[str]:
        return [f"farm: {self.worker}: {e}" for e in events]

    def close(self) -> None:
        """Release the place held and cancel the reservations (the farm's close)."""
        self.farm.close()
