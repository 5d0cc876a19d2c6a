"""The session's device on a labgrid farm (harness/devices/farm.py): whichever phone the place held now
has. A failover switches the phone underneath, so the session-scoped fixtures that hold this
object go on with the new one; everything else is the phone's own.
"""

from __future__ import annotations

from harness.devices.base import Device


class FarmDevice(Device):
    """The session's device on a labgrid farm: the phone of the place held now. A failover
    switches the phone underneath, so the session-scoped fixtures that hold this object go on
    with the new one."""

    def __init__(self, lease, device: Device) -> None:
        self.lease, self.current = lease, device
        self.previous: list[Device] = []

    def switch(self, lease, device: Device) -> None:
        self.previous.append(self.current)
        self.lease, self.current = lease, device

    @property
    def info(self):
        return self.current.info

    @property
    def backends(self):
        return self.current.backends

    @property
    def runner_kind(self) -> str:  # type: ignore[override]  # the held phone's, read-only
        return self.current.runner_kind

    @property
    def dsp_heap(self) -> bool:  # type: ignore[override]  # the held phone's, read-only
        return self.current.dsp_heap

    @property
    def dsp_heap_note(self) -> str:  # type: ignore[override]  # the held phone's, read-only
        return self.current.dsp_heap_note

    @property
    def soc_config(self):
        return self.current.soc_config

    @property
    def limits(self):
        return self.current.limits

    @property
    def title(self) -> str:
        return self.current.title

    @property
    def exploration_limit(self):
        return self.current.exploration_limit

    def replay_args(self) -> list[str]:
        return self.current.replay_args()

    def read_state(self) -> dict:
        return self.current.read_state()

    def report_facts(self) -> dict:
        return self.current.report_facts()

    def runner_description(self) -> str:
        return self.current.runner_description()

    def run(self, scenario, artifacts, timeout):
        return self.current.run(scenario, artifacts, timeout)

    def scratch_dir(self) -> str:
        return self.current.scratch_dir()

    def command(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        return self.current.command(argv, timeout)

    def preflight(self) -> list[str]:
        return []  # every phone passed its preflight before its place was kept

    def summary(self) -> list[str]:
        return [line for d in self.previous + [self.current] for line in d.summary()]

    def close(self) -> None:
        self.current.close()

    def __getattr__(self, name: str):  # anything else of the phone (e.g. AdbDevice.lost)
        try:
            current = self.__dict__["current"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(current, name)
