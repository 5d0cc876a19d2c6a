"""The dlopen shim in a device's payload: pushed to the workspace and first among the preloads
of every run where the device's runtime has QNN (an adb device's and a board's alike), as the
simulator preloads it; nothing of it where the runtime has no QNN backend."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from harness.devices.adb.identify import DeviceIdentity
from harness.devices.adb.payload import device_payload
from harness.devices.payload import with_dlopen_shim
from harness.devices.ssh.payload import board_payload
from harness.qnn import interposer_build
from harness.runner.builds import cmake
from harness.runner.select import DeviceBuild

WS = PurePosixPath("/data/local/tmp/ws")


def _build(tmp_path: Path, abi: str, backends: tuple[str, ...]) -> DeviceBuild:
    build = tmp_path / "build"
    build.mkdir(exist_ok=True)
    for name in ("harness-runner", "libQnnHtp.so", "libharness_qnn_dlopen.so"):
        (build / name).write_bytes(b"x")
    sim = tmp_path / "sim"
    sim.mkdir(exist_ok=True)
    for name in ("libQnnHtp.so", "libQnnSystem.so"):
        (sim / name).write_bytes(b"x")
    return DeviceBuild(abi, build / "harness-runner", build / "libQnnHtp.so", (), backends,
                       "host", build / "libharness_qnn_dlopen.so")


def test_the_shim_goes_first_among_the_preloads():
    files: dict[Path, PurePosixPath] = {}
    env = {"LD_PRELOAD": "/ws/libharness_registry_wrapper.so"}
    with_dlopen_shim(Path("/b/libharness_qnn_dlopen.so"), WS, files, env)
    assert files == {Path("/b/libharness_qnn_dlopen.so"): WS / "libharness_qnn_dlopen.so"}
    assert env["LD_PRELOAD"] == f"{WS}/libharness_qnn_dlopen.so /ws/libharness_registry_wrapper.so"
    alone: dict[str, str] = {}
    with_dlopen_shim(Path("/b/libharness_qnn_dlopen.so"), WS, {}, alone)
    assert alone == {"LD_PRELOAD": f"{WS}/libharness_qnn_dlopen.so"}
    untouched: dict[str, str] = {}
    with_dlopen_shim(None, WS, {}, untouched)  # a build without one (an older Android build)
    assert untouched == {}


def test_adb_devices_and_boards_with_qnn_preload_the_shim(tmp_path):
    build = _build(tmp_path, "x86_64", ("QnnBackend", "XnnpackBackend"))
    identity = DeviceIdentity("s", "SM8650", "ro.soc.model", "x86_64", "14")
    phone = device_payload(identity, build, 75, WS, sdk_root=None,
                           simulator_lib_dir=lambda: tmp_path / "sim")
    assert phone.files[build.dlopen_shim] == WS / "libharness_qnn_dlopen.so"
    assert phone.env["LD_PRELOAD"] == f"{WS}/libharness_qnn_dlopen.so"
    board = board_payload("aarch64", build, 75, WS, sdk=lambda: None,  # type: ignore[arg-type]
                          sdk_root=str(_sdk(tmp_path)))
    assert board.files[build.dlopen_shim] == WS / "libharness_qnn_dlopen.so"
    assert board.env["LD_PRELOAD"] == f"{WS}/libharness_qnn_dlopen.so"


def test_no_shim_where_the_runtime_has_no_qnn(tmp_path):
    build = _build(tmp_path, "x86_64", ("XnnpackBackend",))
    identity = DeviceIdentity("s", "SM8650", "ro.soc.model", "x86_64", "14")
    payload = device_payload(identity, build, 75, WS, sdk_root=None,
                             simulator_lib_dir=lambda: tmp_path / "sim")
    assert "LD_PRELOAD" not in payload.env and build.dlopen_shim not in payload.files


def test_the_builds_name_the_shim_alike():
    assert cmake.DLOPEN_SHIM_NAME == interposer_build.DLOPEN_SHIM_NAME


def _sdk(tmp_path: Path) -> Path:
    """A QAIRT SDK tree with the aarch64 Linux libraries of HTP v75 (empty files)."""
    root = tmp_path / "qairt"
    for rel in ("lib/aarch64-oe-linux-gcc11.2/libQnnHtp.so",
                "lib/aarch64-oe-linux-gcc11.2/libQnnSystem.so",
                "lib/aarch64-oe-linux-gcc11.2/libQnnHtpV75Stub.so",
                "lib/hexagon-v75/unsigned/libQnnHtpV75Skel.so"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")
    return root
