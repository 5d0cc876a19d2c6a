"""QNN library discovery, the interposer build, and the ABI bridge against the real library."""

import importlib.util
from pathlib import Path

import pytest

from harness.drive.driver import ScenarioDriver
from harness.errors import SdkError
from harness.qnn import interposer_build, sdk as sdk_module
from harness.scenario import Scenario


def test_layout_puts_the_interposer_first():
    sdk = sdk_module.discover()
    lib = sdk.lib_dir
    assert (lib / "libQnnHtp.so").resolve() == interposer_build.build_interposer()
    assert (lib / "libQnnSystem.so").resolve() == (sdk.real_lib_dir / "libQnnSystem.so").resolve()
    env = sdk.environment(Path("/tmp/t.txt"))
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(lib)
    assert env["HARNESS_QNN_REAL_HTP"] == str(sdk.real_lib_dir / "libQnnHtp.so")
    assert env["HARNESS_QNN_CALLER_API"] == "2.27" and env["HARNESS_QNN_TRACE"] == "/tmp/t.txt"
    assert "2.38:4" in env["HARNESS_QNN_UNION_AT"].split(",")
    assert sdk_module.discover().root == sdk.root  # laid out once


def test_missing_gcc_names_the_package(monkeypatch):
    monkeypatch.setattr(interposer_build.shutil, "which", lambda name: None)
    with pytest.raises(SdkError, match="apt-get install gcc"):
        interposer_build.build_interposer()


def test_missing_simulator_libraries_name_the_wheel(monkeypatch):
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SdkError, match=r"pip install onnxruntime-qnn==2.7.0"):
        sdk_module.discover()


def test_incomplete_qnn_sdk_root_is_named(monkeypatch, tmp_path):
    (tmp_path / "lib" / "x86_64-linux-clang").mkdir(parents=True)
    monkeypatch.setenv("QNN_SDK_ROOT", str(tmp_path))
    with pytest.raises(SdkError, match=r"has no libQnnHtp.so, libQnnSystem.so"):
        sdk_module.discover()


@pytest.mark.parametrize("bridge", ["auto", "off"])
def test_abi_bridge_decides_whether_the_htp_starts(hil_session, compiled_model, tmp_path, bridge,
                                                  simulator_device):
    """The wheel's QAIRT 2.51 reports core API 2.40, whose library reads the union at byte 8
    where executorch 1.5.1 (core API 2.27) writes it at byte 4: auto bridges and the backend
    starts; forcing the bridge off reproduces the ABI break (backend init fails)."""
    device = simulator_device(hil_session.simulator_runner, bridge)
    driver = ScenarioDriver(device, tmp_path, 300)
    result = driver.run(Scenario(f"bridge_{bridge}").load_module("A", compiled_model("linear_relu"))
                        .execute("A", "forward").destroy_module("A"))
    api = next(r for r in result.trace if r.kind == "api")
    assert api.fields["core"] == "2.40.0"
    if bridge == "auto":
        assert api.fields["bridge"] == "1"
        assert [s.status for s in result.steps] == ["ok", "ok", "ok"]
    else:
        assert api.fields["bridge"] == "0"
        assert result.steps[1].status == "error"
        device_create = next(r for r in result.trace if r.kind == "device_create")
        assert device_create.rc != 0
        assert "unknown custom config socModel 0" in result.output.stderr
