"""The device interface every target implements.

A device kind (`harness.devices.kinds`) opens a `Device`; from then on the session, the
plugin and the reports use only what is here: run a scenario, run a command, read the device's
state, its limits and SoC config, and how to name it again (replay, the header). What differs
by kind lives in the kind's own module.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import logging
from pathlib import Path

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from harness.protocol.output import RunOutput
from harness.scenario import Scenario

if TYPE_CHECKING:
    from harness.config import SocConfig


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the device's checks tolerate and how long a run may take: its SoC config's
    values, unless its kind sets its own (the simulator's config file)."""

    runner_timeout_s: float
    rss_leak_kb: int  # Rss growth tolerated over a reload cycle
    htp_context_kb: int  # dma-buf (HTP shared / spill-fill) memory per live QNN context
    dsp_heap_context_kb: int  # DSP heap per live context
    dsp_heap_leak_kb: int  # DSP heap above the baseline with no context live
    soak_rss_kb_per_cycle: float  # Rss growth per soak cycle (fitted slope)
    soak_heap_bytes_per_cycle: float  # malloc in-use growth per soak cycle (fitted slope)

    @classmethod
    def of(cls, config: SocConfig, **overrides: float) -> Limits:
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)}
        values.update(overrides)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """Identity of a device, shown in the session header and kept in artifacts."""

    serial: str
    kind: str  # the DeviceKind's name: "simulator", "adb", ...
    soc: str
    abi: str
    android: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def header(self) -> str:
        parts = [f"{self.kind} {self.serial}", f"soc={self.soc}", f"abi={self.abi}"]
        if self.android:
            parts.append(f"android={self.android}")
        parts += [f"{k}={v}" for k, v in self.details.items()]
        return " ".join(parts)


class DeviceLog(logging.LoggerAdapter[logging.Logger]):
    """The `harness.device` logger with the device's name in front of every message, so the
    lines of several devices (a farm worker's failover, a test with two) tell themselves
    apart in pytest's captured log and in `--log-cli-level=INFO`."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"[{(self.extra or {})['device']}] {msg}", kwargs


class Device(abc.ABC):
    """A place to run scenarios. One instance per device per session."""

    info: DeviceInfo
    # The resolved SoC config the device runs with (set by its kind when it opens).
    soc_config: SocConfig
    # The backends the device's runtime registers; None when it has every backend the harness
    # drives (the simulator). A device without QnnBackend (an arm64 build of the XNNPACK-only
    # executorch wheel) skips QNN scenarios with that reason.
    backends: tuple[str, ...] | None = None
    # The runner this device runs scenarios with, fixed when the device is built: "native"
    # (harness-runner) or "python" (harness.runner.python_runner, the simulator only).
    runner_kind: str = "native"
    # How many independent scenarios may run on the device at once (the ordering explorer's
    # pool); 1 where runs share per-device state (an adb device's run directory and pushes).
    scenario_jobs: int = 1
    # Whether runs ask QNN for DSP heap readings (harness.qnn.dsp_heap), and what the report says
    # about them on this device.
    dsp_heap: bool = False
    dsp_heap_note: str = ""
    # How many orderings a large exploration samples on this device (evenly spaced); None:
    # all of them. A device with a round trip per scenario takes a sample.
    exploration_limit: int | None = None
    # Why the device is gone for good (it did not come back within its re-acquire window);
    # None while it is usable. A farm retires its place and goes on with another.
    lost: str | None = None

    @property
    def limits(self) -> Limits:
        """Timeouts and leak tolerances (from the SoC config by default)."""
        return Limits.of(self.soc_config)

    @property
    def title(self) -> str:
        """The device as sentences name it ("device 1234abcd", "the HTP simulator")."""
        return f"device {self.info.serial}"

    def replay_args(self) -> list[str]:
        """The `harness replay` arguments that select this device again."""
        return ["--device", self.info.serial]

    def read_state(self) -> dict[str, Any]:
        """Governors, thermal zones and battery now, for reports (harness.devices.state)."""
        from harness.devices.state import read_state

        return read_state(self)

    def report_facts(self) -> dict[str, Any]:
        """Facts of the device's kind for results.json and the report (e.g. the simulator's
        config); empty by default."""
        return {}

    @abc.abstractmethod
    def run(self, scenario: Scenario, artifacts: Path, timeout: float) -> RunOutput:
        """Run `scenario` with the device's runner, in fresh process state, and return what
        it produced.

        A hang is killed after `timeout` seconds and reported in the output (`timed_out`),
        never raised: the session goes on.
        """

    @functools.cached_property
    def log(self) -> DeviceLog:
        """This device's logger (debug: every run; info: set-up, pushes, reconnects)."""
        return DeviceLog(logging.getLogger("harness.device"), {"device": self.info.serial})

    def runner_description(self) -> str:
        """The runner and how scenarios are isolated, for the session header."""
        return self.runner_kind

    @abc.abstractmethod
    def scratch_dir(self) -> str:
        """A directory where scenarios may create files (e.g. weight caches).

        The path is valid in scenario files (backend options, watch_mappings) and in `command`;
        on adb devices it is relative to the runner's working directory, because a stand-in
        device maps device paths only in commands, never inside files.
        """

    @abc.abstractmethod
    def command(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        """Run a command on the device (each argument quoted for you); (exit code, output)."""

    def preflight(self) -> list[str]:
        """Problems that make this device unusable, as sentences; empty when it is fine."""
        return []

    def summary(self) -> list[str]:
        """Lines for the end-of-session summary (e.g. push counts)."""
        return []

    def close(self) -> None:  # noqa: B027  (a device with nothing to release keeps it)
        """Release the device (workspace, connections)."""
