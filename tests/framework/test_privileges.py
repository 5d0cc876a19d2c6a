"""harness.runner.privileges: a process started without root's permission-bypassing
capabilities meets a directory's mode as a user does (the EACCES the XNNPACK cache suite
needs from a runner that is not root), and a misspelt capability is one clear error."""

from __future__ import annotations

import os
import subprocess

import pytest

from harness.errors import HarnessError
from harness.runner.privileges import capabilities_dropped

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


@pytest.mark.parametrize("where", ["adb", "ssh"])
def test_a_device_refuses_a_scenario_with_capabilities_dropped(where, tmp_path):
    """setpriv runs on the host: a phone's or a board's runner cannot honour it, so the device
    says so instead of running the scenario with root's capabilities."""
    from harness.devices.adb.device import AdbDevice
    from harness.devices.ssh.device import SshDevice
    from harness.errors import DeviceError
    from harness.scenario import Scenario

    kind = AdbDevice if where == "adb" else SshDevice
    device = kind.__new__(kind)  # refused before it touches a device
    scenario = Scenario("eacces")
    scenario.drop_capabilities = NOT_ROOT
    with pytest.raises(DeviceError, match="host simulator only"):
        device.run(scenario, tmp_path, 10)
