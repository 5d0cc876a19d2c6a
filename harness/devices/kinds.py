"""Device kinds: how a `--device` value names a device, which options the kind adds, what it
checks at start-up and how a session opens one.

The session and the plugin look a kind up here (`kind_for`) and know nothing else of it: no
code outside `harness/devices/` asks which kind a device is. A kind is added with one module (or
package) under `harness/devices/` and one line in `KINDS`, in the manner of labgrid's
resource + driver pair: the kind says where a device is and how to reach it, the `Device` it
opens (`harness.devices.base`) how to use it.

A session's targets (`session_targets`): `SIMULATOR` without `--device` (or with
`--simulator`), else one `--device` value per pytest-xdist worker. The first kind in `KINDS`
whose `claims` accepts a value opens it; adb is last, since a plain serial is its form.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from typing import TYPE_CHECKING, Any, ClassVar
from collections.abc import Callable, Iterator

from harness.errors import HarnessError

if TYPE_CHECKING:
    import pytest

    from harness.devices.base import Device
    from harness.devices.farm import Lease
    from harness.qnn.sdk import QnnSdk
    from harness.runner.select import RunnerChoice
    from harness.config.options import Options

# The target of a session on the host's HTP simulator (no --device, or --simulator).
SIMULATOR = "simulator"

# The registry: "module:Class", tried in order; the first kind that claims a value opens it.
KINDS: tuple[str, ...] = (
    "harness.devices.simulator:SimulatorKind",
    "harness.devices.ssh:SshKind",
    "harness.devices.adb:AdbKind",  # last: a plain SERIAL (or adb://SERIAL)
)


@dataclasses.dataclass
class OpenContext:
    """What a kind may use to open a device: the session's options, the pytest config (for
    the kind's own options), a way to add a line to the session header, and the host's QNN
    libraries and simulator runner (found on first use: a kind that needs neither never
    touches them)."""

    options: Options
    notice: Callable[[str], None]
    sdk: Callable[[], QnnSdk]
    simulator_runner: Callable[[], RunnerChoice]
    config: pytest.Config | None = None
    # A labgrid place the device comes from (harness/devices/farm.py): its adb server and SoC tag.
    place: Lease | None = None

    def option(self, name: str, default: Any = None) -> Any:
        """A kind's own pytest option; outside pytest (`harness replay`) the value the options
        carry for it (`Options.kind_options`), else `default`."""
        if self.config is None:
            return self.options.kind_options.get(name, default)
        try:
            return self.config.getoption(name)
        except ValueError:
            return default


class DeviceKind(abc.ABC):
    """One kind of device. Class-level only: a kind is a recipe, the `Device` it opens holds
    the state."""

    name: ClassVar[str]
    # How the kind appears in the session header's target line ("HTP simulator").
    title: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def claims(cls, target: str) -> bool:
        """Whether this `--device` value (or `SIMULATOR`) names a device of this kind."""

    @classmethod  # noqa: B027  (optional: most kinds add no options)
    def add_options(cls, group: pytest.OptionGroup) -> None:
        """Add the kind's own pytest options to the `hil` group."""

    @classmethod  # noqa: B027  (optional: a kind without input of its own checks nothing)
    def check_start_up(cls, targets: list[str], context: OpenContext) -> None:
        """Raise HarnessError for bad input of this kind (a malformed target, an option out of
        range) before any device is touched: one usage error, not one per test."""

    @classmethod
    def known_soc(cls, options: Options) -> str | None:
        """The SoC scenarios run on when it is known before the device opens (the simulated
        one), so programs built for another SoC are refused at start-up; None otherwise."""
        return None

    @classmethod
    def describe(cls, target: str) -> str:
        """The target as the session header names it."""
        return target

    @classmethod
    @abc.abstractmethod
    def open(cls, target: str, context: OpenContext) -> Device:
        """Identify the device, resolve its SoC config and set it up; a ready device, or a
        HarnessError that says what to do."""

    @classmethod
    def online(cls, target: str, context: OpenContext) -> bool:
        """Whether the device answers now (a farm retires a place whose device does not)."""
        return True


def kinds() -> Iterator[type[DeviceKind]]:
    """The registered kinds in claiming order, each imported when reached: a simulator
    session never imports the adb kind (whose adbutils reads the adb environment)."""
    for entry in KINDS:
        module, _, name = entry.partition(":")
        yield getattr(importlib.import_module(module), name)


def kind_for(target: str) -> type[DeviceKind]:
    """The kind that opens `target`."""
    for kind in kinds():
        if kind.claims(target):
            return kind
    raise HarnessError(f"--device {target!r}: no device kind takes this form; give an adb "
                       "serial (or adb://SERIAL), ssh://[user@]host[:port], or --simulator")


def uses_farm(options: Options) -> bool:
    """Devices come from labgrid places (--lg-place-tags), not from --device/--farm."""
    return bool(options.lg_place_tags) and not options.simulator


def chosen_devices(options: Options) -> list[str]:
    """The --device values this session uses (none when --simulator overrides them)."""
    return [] if options.simulator else list(options.devices)


def session_targets(options: Options) -> list[str]:
    """The targets this session's workers divide among them: `SIMULATOR`, or the --device
    values (a labgrid farm's places are opened by the adb kind: an empty list)."""
    if not chosen_devices(options) and not uses_farm(options):
        return [SIMULATOR]
    return chosen_devices(options)


def worker_target(options: Options) -> str:
    """This worker's target: worker N of an xdist run takes the Nth one."""
    targets = session_targets(options)
    if not targets:
        raise HarnessError("no device: this session takes its devices from labgrid places")
    index = int(options.worker[2:]) if options.worker.startswith("gw") else 0
    return targets[index % len(targets)]


def session_kinds(options: Options) -> list[type[DeviceKind]]:
    """The kinds of this session's targets, each once (the adb kind for a labgrid farm)."""
    found = [kind_for(t) for t in session_targets(options)]
    if uses_farm(options):
        found.append(kind_named("adb"))
    return list(dict.fromkeys(found))


def kind_named(name: str) -> type[DeviceKind]:
    """The registered kind called `name`, looked up in the registry (so this module imports
    no kind: each kind imports this one)."""
    for kind in kinds():
        if kind.name == name:
            return kind
    raise HarnessError(f"no device kind named {name!r}")
