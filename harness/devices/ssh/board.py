"""Opening a board in phases (as the adb kind does): connect, identify, resolve the SoC
config, build the payload for its architecture, set up (lease, workspace, pushes)."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable

from harness.config import resolve_soc_config
from harness.devices import workspace as ws_rules
from harness.devices.ssh import device as ssh_device
from harness.devices.ssh.identify import SCRIPT, parse_identity
from harness.devices.ssh.payload import board_payload
from harness.devices.ssh.target import parse_target
from harness.devices.ssh.transport import SshTransport
from harness.errors import ConfigError, DeviceError
from harness.qnn.sdk import QnnSdk

ARCHES = ("auto", "aarch64", "x86_64")


def check_arch(value: str) -> str:
    if value not in ARCHES:
        raise ConfigError(f"--ssh-arch must be one of {', '.join(ARCHES)}, not {value!r}")
    return value


def open_board(target: str, options, *, notice: Callable[[str], None],
               sdk: Callable[[], QnnSdk], ssh_config: Path | None = None,
               arch: str = "auto", lease_dir: str = ssh_device.LEASE_DIR) -> ssh_device.SshDevice:
    """A ready SshDevice for `target` (`options`: the session's harness.config.options.Options).
    `lease_dir`: where on the board its lease lives (one per host by default; a test that
    stands several boards up on one host gives each its own)."""
    parsed = parse_target(target)
    check_arch(arch)
    if ssh_config is not None and not Path(ssh_config).is_file():
        raise ConfigError(f"--ssh-config {ssh_config}: no such file")
    transport = SshTransport(parsed, ssh_config, options.connect_s or ssh_device.CONNECT_S)
    try:
        transport.connect()
        code, out = transport.run(SCRIPT, 30)
        identity = parse_identity(parsed.text, out)
        if not identity.machine:
            raise DeviceError(f"{parsed.text}: `uname -m` gave nothing (exit {code}: "
                              f"{out.strip()[-200:]}); the board needs a POSIX shell")
        machine = identity.machine if arch == "auto" else arch
        config, source = resolve_soc_config(
            parsed.text, identity.soc, soc=options.soc, device_config=options.device_config,
            reported_from=identity.soc_source)
        root = ssh_device.workspace_root(identity)
        workspace = (ws_rules.check_workspace(options.device_workspace, scratch=root)
                     if options.device_workspace is not None
                     else ssh_device.new_workspace(root, options.worker))
        device = ssh_device.SshDevice(
            transport, identity, config, workspace, root, artifacts_dir=options.artifacts_dir,
            keep_workspace=options.keep_workspace,
            reacquire_s=options.reacquire_s or ssh_device.REACQUIRE_S, soc_source=source,
            notice=notice, session_id=options.session_id, worker=options.worker,
            lease_wait=options.lease_wait, isolation=options.scenario_isolation,
            machine=machine, machine_source="--ssh-arch", lease_dir=lease_dir)
        if options.runner == "python":
            notice("ssh boards always use the native runner; --runner=python applies to the "
                   "simulator only")
        from harness.runner.select import device_build

        payload = board_payload(machine, device_build(machine), config.htp_arch, workspace,
                                sdk=sdk, sdk_root=os.environ.get("QNN_SDK_ROOT"),
                                dsp_heap_setting=options.dsp_heap)
        device.setup(payload)
        return device
    except BaseException:
        transport.close()
        raise
