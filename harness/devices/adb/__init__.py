"""The adb device kind: Android devices through an adb server, named `--device SERIAL` (a USB
id or host:port) or `adb://SERIAL`, and the phones of labgrid places (harness/devices/farm.py).

Modules by concern: `address` (where the adb server is), `transport` (the adb server's
connections, commands, pushes, and `AdbProxy`, through which every adb call goes), `identify`
(what a device says about itself), `payload` (what a device gets for its build), `fork` (the
served runner over a shell stream), `device` (AdbDevice).

This module imports no adbutils, which reads the adb environment when imported: the kind's
options and start-up checks come first, and the heavy modules wait for `online` and `open`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from pathlib import PurePosixPath

from harness.config import load_farm
from harness.devices.adb.address import adb_server_address
from harness.devices.kinds import DeviceKind, OpenContext
from harness.devices import workspace as ws_rules
from harness.errors import ConfigError, DeviceError

if TYPE_CHECKING:
    from harness.devices.adb.device import AdbDevice


class AdbKind(DeviceKind):
    """Android devices through an adb server: `--device SERIAL` (a USB id or host:port) or
    `adb://SERIAL`, and the phones of labgrid places (harness/devices/farm.py)."""

    name = "adb"
    title = "adb device"
    SCHEME = "adb://"

    @classmethod
    def claims(cls, target: str) -> bool:
        return bool(target) and "://" not in target.removeprefix(cls.SCHEME)

    @classmethod
    def serial(cls, target: str) -> str:
        return target.removeprefix(cls.SCHEME)

    @classmethod
    def add_options(cls, group) -> None:
        group.addoption("--adb-server", default=None, metavar="HOST:PORT",
                        help="adb server to use (default: ANDROID_ADB_SERVER_ADDRESS/PORT or "
                             "127.0.0.1:5037)")
        group.addoption("--keep-workspace", action="store_true",
                        help="leave the on-device workspace in place at the end of the session")
        group.addoption("--device-workspace", default=None, metavar="PATH",
                        help="on-device workspace directory, an absolute path below "
                             "/data/local/tmp/ (default: a new one per session and worker "
                             "there); reuse one to skip pushes across runs. Only what the "
                             "harness created in it is ever removed")
        group.addoption("--lease-wait", type=float, default=0.0, metavar="SECONDS",
                        help="how long to wait for a device another session holds (its lease, "
                             "/data/local/tmp/.executorch-hil-lease on the device); default 0: "
                             "fail at once, naming the holder")

    @classmethod
    def check_start_up(cls, targets: list[str], context: OpenContext) -> None:
        from harness.config import soc_config

        opts = context.options
        farm_server, farm_socs = cls._farm(context)
        adb_server_address(cls._server(context, farm_server))
        for soc in farm_socs.values():
            soc_config(soc)  # an unknown SoC in the farm file: now, not when its phone opens
        if opts.device_workspace is not None:
            ws_rules.check_workspace(opts.device_workspace,
                                     reserved=[PurePosixPath(_lease_dir()).name])
        if opts.lease_wait < 0:
            raise ConfigError(f"--lease-wait must be 0 or more seconds, got {opts.lease_wait:g}")
        empty = [t for t in targets if not cls.serial(t)]
        if empty:
            raise ConfigError(f"--device {empty[0]!r}: no serial after {cls.SCHEME}")

    @classmethod
    def _server(cls, context: OpenContext, farm_server: str | None) -> str | None:
        """A labgrid place's adb server, else --adb-server, else the farm file's."""
        place = context.place
        if place is not None and place.adb:
            return place.adb
        return context.option("adb_server") or farm_server

    @classmethod
    def _farm(cls, context: OpenContext) -> tuple[str | None, dict[str, str]]:
        """The farm file's adb server, and the SoC of each of its serials that names one (it
        overrides what the phone reports); (None, {}) without a farm file."""
        farm = context.options.farm
        if farm is None:
            return None, {}
        server, entries = load_farm(farm)
        return server, {e["serial"]: e["soc"] for e in entries if "soc" in e}

    @classmethod
    def online(cls, target: str, context: OpenContext) -> bool:
        from harness.devices.adb.transport import AdbProxy, adb_client

        try:
            server = cls._server(context, cls._farm(context)[0])
            AdbProxy(adb_client(server), cls.serial(target)).wait_online(0)
        except DeviceError:
            return False
        return True

    @classmethod
    def open(cls, target: str, context: OpenContext) -> AdbDevice:
        """An adb device in phases: identify it, resolve its SoC config, set it up with
        explicit arguments. A labgrid place's `adb` and `soc=` tags replace --adb-server and
        the farm file's SoC."""
        from harness.config import resolve_soc_config
        from harness.devices.adb.device import CONNECT_S, REACQUIRE_S, AdbDevice, new_workspace
        from harness.devices.adb.identify import identify
        from harness.devices.adb.payload import device_payload
        from harness.devices.adb.transport import AdbProxy, adb_client
        from harness.runner.select import device_build

        opts, place, serial = context.options, context.place, cls.serial(target)
        farm_server, farm_socs = cls._farm(context)
        server = cls._server(context, farm_server)
        adb = AdbProxy(adb_client(server), serial)
        adb.wait_online(opts.connect_s or CONNECT_S)
        identity = identify(adb)
        config, source = resolve_soc_config(
            serial, identity.soc, farm_soc=place.soc if place else farm_socs.get(serial),
            farm_from=f"place {place.place} tag soc" if place else "farm file", soc=opts.soc,
            device_config=opts.device_config, reported_from=identity.soc_source)
        workspace = (ws_rules.check_workspace(opts.device_workspace,
                                              reserved=[PurePosixPath(_lease_dir()).name])
                     if opts.device_workspace is not None else new_workspace(opts.worker))
        device = AdbDevice(adb, identity, config, workspace,
                           artifacts_dir=opts.artifacts_dir, keep_workspace=opts.keep_workspace,
                           reacquire_s=opts.reacquire_s or REACQUIRE_S, soc_source=source,
                           notice=context.notice, session_id=opts.session_id,
                           worker=opts.worker, lease_wait=opts.lease_wait,
                           isolation=opts.scenario_isolation)
        device.adb_server = server
        if opts.runner == "python":
            context.notice("adb devices always use the native runner; "
                           "--runner=python applies to the simulator only")
        payload = device_payload(identity, device_build(identity.abi), config.htp_arch,
                                 workspace, sdk_root=os.environ.get("QNN_SDK_ROOT"),
                                 simulator_lib_dir=lambda: context.sdk().lib_dir,
                                 dsp_heap_setting=opts.dsp_heap)
        device.setup(payload.runner, payload.files, payload.env, payload.backends,
                     payload.dsp_heap_note)
        return device


def _lease_dir() -> str:
    """The device lease's directory on the phone (harness.devices.lease), imported when an adb
    device is really used: the kind is imported by every session for its options."""
    from harness.devices.lease import LEASE_DIR

    return LEASE_DIR
