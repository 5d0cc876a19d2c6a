"""harness.runner.privileges: a process started without root's permission-bypassing
capabilities meets a directory's mode as a user does (the EACCES the XNNPACK cache suite
needs from a runner that is not root), and a misspelt capability is one clear error."""

from __future__ import annotations

import os
import subprocess

import pytest

from harness.errors import HarnessError
from harness.runner.privileges import capabilities_dropped, without_capabilities

NOT_ROOT = ["dac_override", "dac_read_search", "fowner"]


def test_a_process_without_the_capabilities_is_refused_a_directory_it_does_not_own(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("root drops capabilities here; a user is refused anyway")
    directory = tmp_path / "not-mine"
    directory.mkdir()
    os.chown(directory, 65534, 65534)
    directory.chmod(0o755)
    touch = ["sh", "-c", f"touch {directory}/x"]
    assert subprocess.run(touch).returncode == 0  # root as it is: allowed
    os.unlink(directory / "x")
    refused = subprocess.run(capabilities_dropped(NOT_ROOT) + touch, capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "Permission denied" in refused.stderr
    assert not (directory / "x").exists()


def test_no_capabilities_is_no_prefix_and_a_bad_name_is_refused():
    assert capabilities_dropped([]) == []
    with pytest.raises(HarnessError, match="spell them as setpriv does"):
        capabilities_dropped(["CAP_DAC_OVERRIDE"])
    with pytest.raises(HarnessError, match="spell them as setpriv does"):
        without_capabilities([])


def _device(where: str, found: str):
    """An adb or ssh device, unconnected, whose shell answers `command -v` with `found`."""
    from harness.devices.adb.device import AdbDevice
    from harness.devices.ssh.device import SshDevice

    kind = AdbDevice if where == "adb" else SshDevice
    device = kind.__new__(kind)  # refused before it touches a device
    device.serial = "dev1"
    device.sh = lambda command, timeout=60.0: (0 if found else 1, found)  # type: ignore
    return device


@pytest.mark.parametrize("where", ["adb", "ssh"])
def test_a_device_without_setpriv_refuses_naming_the_package(where, tmp_path):
    """setpriv runs on the device as on the host when the device has it; a phone has not, so
    the device says which package would give it instead of running the scenario with root's
    capabilities."""
    from harness.errors import DeviceError
    from harness.scenario import Scenario

    scenario = Scenario("eacces")
    scenario.launch = [without_capabilities(NOT_ROOT)]
    with pytest.raises(DeviceError, match=r"on dev1: .*setpriv.*Debian package util-linux"):
        _device(where, "").run(scenario, tmp_path, 10)


@pytest.mark.parametrize("where", ["adb", "ssh"])
def test_a_device_with_the_tool_starts_the_runner_under_it(where):
    from harness.scenario import Scenario

    scenario = Scenario("eacces")
    scenario.launch = [without_capabilities(NOT_ROOT)]
    prefix = _device(where, "/usr/bin/setpriv").launch_prefix(scenario)
    assert prefix == ("setpriv --bounding-set -dac_override,-dac_read_search,-fowner -- ")
