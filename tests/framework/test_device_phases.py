"""Device construction in phases (identify -> resolve the SoC config -> set up), for phones of
SM8550, SM8650, SM8750 and an unknown SoC.

The aarch64-android QNN libraries cannot exist here, so a fake SDK laid out like QAIRT's (small
files with distinct contents) stands in for QNN_SDK_ROOT, and loopback devices report an arm64
ABI: construction pushes the fake libraries through the real adb server, and the preflight
compares them, exactly as on a phone (nothing is run on these devices).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from harness.config import known_socs, resolve_soc_config, soc_config
from harness.devices.adb import device as adb_device, identify as adb_identify
from harness.devices.adb.transport import AdbProxy, adb_client
from harness.devices.adb import payload as adb_payload
from harness.devices.adb.payload import qnn_device_libraries
from harness.devices.workspace import MARKER
from harness.errors import ConfigError, DeviceError
from harness.loopback import LoopbackDevice, connect, disconnect, start_server
from harness.session import HilSession

from adb_options import adb_options

pytest_plugins = ["pytester"]
ARCH = {"SM8550": 73, "SM8650": 75, "SM8750": 79}
ARCHES = (73, 75, 79)
WS = PurePosixPath("/data/local/tmp/ws")
needs_adb = pytest.mark.skipif(shutil.which("adb") is None,
                               reason="the adb client/server (Debian package adb) is not installed")


def fake_sdk(root: Path) -> Path:
    """A QAIRT-like SDK: lib/aarch64-android/* and lib/hexagon-v<arch>/unsigned/*Skel.so, each
    file's content naming itself, so a wrong arch shows in the bytes the device got."""
    android = root / "lib" / "aarch64-android"
    android.mkdir(parents=True)
    for name in ["libQnnHtp.so", "libQnnSystem.so"] + [f"libQnnHtpV{a}Stub.so" for a in ARCHES]:
        (android / name).write_bytes(f"fake aarch64 {name}\n".encode())
    for a in ARCHES:
        skel = root / "lib" / f"hexagon-v{a}" / "unsigned" / f"libQnnHtpV{a}Skel.so"
        skel.parent.mkdir(parents=True)
        skel.write_bytes(f"fake hexagon-v{a} Skel\n".encode())
    return root


@pytest.fixture
def sdk_root(tmp_path) -> Path:
    return fake_sdk(tmp_path / "qairt")


options = adb_options


# The arm64 library choice: a pure function of the SDK root, the HTP arch and the workspace ------

@pytest.mark.parametrize("soc", sorted(ARCH))
def test_each_soc_gets_the_stub_and_skel_of_its_arch(soc, sdk_root):
    arch = soc_config(soc).htp_arch
    assert arch == ARCH[soc]
    files = qnn_device_libraries(sdk_root, arch, WS)
    android = sdk_root / "lib" / "aarch64-android"
    assert files == {
        android / "libQnnHtp.so": WS / "libQnnHtp.so",
        android / "libQnnSystem.so": WS / "libQnnSystem.so",
        android / f"libQnnHtpV{arch}Stub.so": WS / f"libQnnHtpV{arch}Stub.so",
        sdk_root / "lib" / f"hexagon-v{arch}" / "unsigned" / f"libQnnHtpV{arch}Skel.so":
            WS / f"libQnnHtpV{arch}Skel.so",
    }
    others = [a for a in ARCHES if a != arch]
    assert not any(f"V{a}" in str(p) for p in files for a in others)


def test_a_missing_skel_names_every_missing_file(sdk_root):
    (sdk_root / "lib" / "hexagon-v79" / "unsigned" / "libQnnHtpV79Skel.so").unlink()
    (sdk_root / "lib" / "aarch64-android" / "libQnnHtpV79Stub.so").unlink()
    with pytest.raises(DeviceError) as exc:
        qnn_device_libraries(sdk_root, 79, WS)
    assert "libQnnHtpV79Skel.so" in str(exc.value) and "libQnnHtpV79Stub.so" in str(exc.value)
    assert "HTP v79" in str(exc.value)


def test_an_arm64_device_without_qnn_sdk_root_is_told_to_set_it():
    with pytest.raises(DeviceError, match="set QNN_SDK_ROOT"):
        adb_payload.qnn_libraries("arm64-v8a", 75, WS, sdk_root=None, simulator_lib_dir=lambda: Path("/x"))


# Resolving the SoC config: farm entry, --soc, what the device reports ---------------------------

def test_precedence_farm_then_soc_option_then_reported():
    assert resolve_soc_config("s", "SM8650")[0].soc == "SM8650"
    assert resolve_soc_config("s", "SM8650", soc="SM8550")[0].soc == "SM8550"
    config, source = resolve_soc_config("s", "SM8650", farm_soc="SM8750", soc="SM8550")
    assert (config.soc, config.htp_arch, source) == ("SM8750", 79, "farm file")
    config, source = resolve_soc_config("s", "SM8550", reported_from="ro.board.platform=kalama")
    assert (config.htp_arch, source) == (73, "ro.board.platform=kalama")


def test_device_config_replaces_the_file_of_the_resolved_soc(tmp_path):
    custom = tmp_path / "SM8550.yaml"
    custom.write_text(soc_config("SM8550").path.read_text().replace("rss_leak_kb: 8192",
                                                                    "rss_leak_kb: 1234"))
    config, _ = resolve_soc_config("s", "SM8550", device_config=custom)
    assert (config.path, config.rss_leak_kb, config.htp_arch) == (custom, 1234, 73)
    # A config for another SoC than the device's is refused: V73 libraries for an SM8650 build
    # would fail only on the phone.
    with pytest.raises(ConfigError, match="is the config of SM8550, but the device's SoC is SM8650"):
        resolve_soc_config("s", "SM8650", device_config=custom)
    # Nothing names the SoC: the file does.
    assert resolve_soc_config("s", "", device_config=custom)[0].soc == "SM8550"


def test_unknown_and_missing_socs_are_one_clear_error():
    with pytest.raises(ConfigError) as exc:
        resolve_soc_config("phone1", "SM1234")
    text = str(exc.value)
    assert "device phone1 (the device): SoC SM1234 has no config" in text
    assert "Known SoCs: SM8550, SM8650, SM8750" in text
    assert "cp " in text and "SM8550.yaml SM1234.yaml" in text and "--device-config" in text
    with pytest.raises(ConfigError, match=r"no SoC: ro.soc.model is empty"):
        resolve_soc_config("phone1", "", reported_from="ro.soc.model is empty and ...")


# Through the real adb server: loopback phones reporting each SoC ---------------------------------

@pytest.fixture
def arm64(monkeypatch, sdk_root, tmp_path):
    """The environment an arm64 phone needs: the SDK's libraries and an Android build directory
    as `build-runner --android` leaves it (stand-in files: nothing runs): the runner, the QNN
    interposer, and the components its configure linked (QNN among them)."""
    build = tmp_path / "android-build"
    build.mkdir()
    (build / "harness-runner").write_bytes(b"\x7fELF fake aarch64 runner\n")
    (build / "libQnnHtp.so").write_bytes(b"\x7fELF fake aarch64 interposer\n")
    (build / "harness-runner-components.txt").write_text("backend_xnnpack\nbackend_qnn\n")
    monkeypatch.setenv("QNN_SDK_ROOT", str(sdk_root))
    monkeypatch.setenv("EXECUTORCH_HIL_ANDROID_BUILD", str(build))
    return sdk_root


def phone(tmp_path: Path, name: str, **props: str) -> LoopbackDevice:
    start_server()
    dev = LoopbackDevice(tmp_path / name, properties={"ro.product.cpu.abi": "arm64-v8a", **props})
    dev.start()
    connect(dev.serial)
    return dev


def drop(dev: LoopbackDevice) -> None:
    disconnect(dev.serial, missing_ok=True)
    dev.stop()


def on_device(dev: LoopbackDevice, remote: PurePosixPath) -> Path:
    return dev.sandbox / str(remote).lstrip("/")


def check_pushed(dev: LoopbackDevice, session: HilSession, arch: int, sdk_root: Path) -> None:
    """The workspace holds the SDK's bytes for `arch` and nothing of another arch, and the
    preflight expects exactly those (its only problem here: no fastrpc node on a host)."""
    device = session.device
    workspace = on_device(dev, device.workspace)
    names = sorted(p.name for p in workspace.iterdir() if p.is_file() and p.name != MARKER)
    assert names == sorted(["executorch_hil_runner", "libQnnHtp.so", "libQnnSystem.so",
                            f"libQnnHtpV{arch}Skel.so", f"libQnnHtpV{arch}Stub.so"])
    assert (workspace / f"libQnnHtpV{arch}Stub.so").read_bytes() == \
        (sdk_root / "lib" / "aarch64-android" / f"libQnnHtpV{arch}Stub.so").read_bytes()
    assert (workspace / f"libQnnHtpV{arch}Skel.so").read_bytes() == \
        f"fake hexagon-v{arch} Skel\n".encode()
    # The harness's interposer takes the name libQnnHtp.so (the QNN call trace on the phone);
    # the SDK's real library sits in qnn/, where the interposer's variable points.
    assert (workspace / "libQnnHtp.so").read_bytes() == b"\x7fELF fake aarch64 interposer\n"
    assert (workspace / "qnn" / "libQnnHtp.so").read_bytes() == \
        (sdk_root / "lib" / "aarch64-android" / "libQnnHtp.so").read_bytes()
    assert device.run_env["HARNESS_QNN_REAL_HTP"] == str(device.workspace / "qnn" / "libQnnHtp.so")
    problems = device.preflight()
    assert len(problems) == 1 and "no fastrpc device node" in problems[0]
    report = device.preflight_report
    assert report["htp_arch"] == arch
    assert sorted(PurePosixPath(r).name for r in report["qnn_libraries"]) == sorted(
        ["libQnnHtp.so", "libQnnHtp.so", "libQnnSystem.so", f"libQnnHtpV{arch}Skel.so",
         f"libQnnHtpV{arch}Stub.so"])
    assert all(v["matches_sdk"] for v in report["qnn_libraries"].values())


@needs_adb
@pytest.mark.parametrize("soc", sorted(ARCH))
def test_phone_reporting_its_soc_gets_that_socs_config_and_libraries(soc, arm64, tmp_path):
    dev = phone(tmp_path, "phone", **{"ro.soc.model": soc})
    try:
        session = HilSession(options(tmp_path, dev.serial))
        device = session.device
        assert (session.soc, session.soc_config.soc, session.soc_config.htp_arch) == \
            (soc, soc, ARCH[soc])
        assert session.soc_config.path == soc_config(soc).path
        assert session.timeout == soc_config(soc).runner_timeout_s
        assert session.rss_leak_kb == soc_config(soc).rss_leak_kb
        assert session.htp_context_kb == soc_config(soc).htp_context_kb
        assert (device.info.soc, device.info.abi, device.info.details["soc_from"]) == \
            (soc, "arm64-v8a", "ro.soc.model")
        check_pushed(dev, session, ARCH[soc], arm64)
        device.close()
    finally:
        drop(dev)


@needs_adb
def test_phone_with_only_a_board_platform_is_found_through_the_configs(arm64, tmp_path):
    """An SM8550 build that leaves ro.soc.model empty, started as its own process through
    `python -m harness.loopback` (the CLI a developer uses)."""
    start_server()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.loopback", "--sandbox", str(tmp_path / "kalama"),
         "--no-simulator-env", "--prop", "ro.soc.model=", "--prop", "ro.board.platform=kalama",
         "--prop", "ro.product.cpu.abi=arm64-v8a"],
        stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serial: "), line
        serial = line.split()[1]
        identity = adb_identify.identify(AdbProxy(adb_client(), serial))
        assert (identity.soc, identity.soc_source, identity.board_platform) == \
            ("SM8550", "ro.board.platform=kalama", "kalama")
        session = HilSession(options(tmp_path, serial))
        assert (session.soc, session.soc_config.htp_arch) == ("SM8550", 73)
        assert session.device.info.details["soc_from"] == "ro.board.platform=kalama"
        check_pushed(_Sandbox(tmp_path / "kalama"), session, 73, arm64)
        session.device.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class _Sandbox:
    """The part of a LoopbackDevice `check_pushed` uses, for one running in another process."""

    def __init__(self, sandbox: Path) -> None:
        self.sandbox = sandbox.resolve()


def farm_file(path: Path, socs: dict[str, str]) -> Path:
    """A farm file (device_configs/farms/) listing `socs`' serials with their SoCs."""
    path.write_text("devices:\n" + "".join(f"  - serial: {serial!r}\n    soc: {soc}\n"
                                            for serial, soc in socs.items()))
    return path


@needs_adb
def test_farm_entry_soc_wins_over_soc_option_and_the_device(arm64, tmp_path):
    dev = phone(tmp_path, "phone", **{"ro.soc.model": "SM8650"})
    try:
        session = HilSession(options(tmp_path, dev.serial, soc="SM8550",
                                     farm=farm_file(tmp_path / "farm.yaml",
                                                    {dev.serial: "SM8750", "other:1": "SM8550"})))
        assert (session.soc, session.soc_config.htp_arch) == ("SM8750", 79)
        details = session.device.info.details
        assert (details["soc_from"], details["reported_soc"]) == ("farm_file", "SM8650")
        check_pushed(dev, session, 79, arm64)
        session.device.close()
        # Without a farm entry for this serial, --soc wins over what the device reports.
        session = HilSession(options(tmp_path, dev.serial, soc="SM8550",
                                     farm=farm_file(tmp_path / "farm2.yaml",
                                                    {"other:1": "SM8750"})))
        assert (session.soc, session.soc_config.htp_arch) == ("SM8550", 73)
        session.device.close()
    finally:
        drop(dev)


@needs_adb
def test_unknown_soc_fails_once_with_the_known_socs(arm64, tmp_path, monkeypatch):
    calls = []
    real_identify = adb_identify.identify
    monkeypatch.setattr(adb_identify, "identify", lambda *a: calls.append(a) or real_identify(*a))
    dev = phone(tmp_path, "phone", **{"ro.soc.model": "SM1234"})
    try:
        session = HilSession(options(tmp_path, dev.serial))
        with pytest.raises(ConfigError) as first:
            _ = session.device
        with pytest.raises(ConfigError) as again:
            _ = session.soc_config  # every later caller: the same error, adb not asked again
        with pytest.raises(ConfigError):
            _ = session.timeout
    finally:
        drop(dev)
    assert again.value is first.value and len(calls) == 1
    text = str(first.value)
    assert f"device {dev.serial} (ro.soc.model): SoC SM1234 has no config" in text
    assert "Known SoCs: " + ", ".join(known_socs()) in text and "SM8550, SM8650, SM8750" in text
    assert "copy a neighbour's config" in text
    # Nothing was pushed to the unknown phone.
    assert not any(p.name.startswith("executorch-hil-")
                   for p in (dev.sandbox / "data" / "local" / "tmp").iterdir())


def test_adb_devices_get_their_config_not_the_session():
    """No adb/device.py <-> session.py cycle: the device module never names the session, and
    importing it does not load the session module."""
    tree = ast.parse(Path(adb_device.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "harness.session" not in imported and not hasattr(adb_device, "TYPE_CHECKING")
    assert not hasattr(adb_device, "PLATFORM_SOC")
    code = subprocess.run([sys.executable, "-c", "import harness.devices.adb.device, sys; "
                           "sys.exit('harness.session' in sys.modules)"]).returncode
    assert code == 0, "importing harness.devices.adb.device pulls in harness.session"


@needs_adb
def test_unknown_soc_through_the_plugin_is_one_error_for_every_test(pytester, tmp_path,
                                                                   monkeypatch):
    """`pytest --device=<serial>` on a phone of an unknown SoC: each test using the device
    errors with the same line (the device is built once), naming the known SoCs."""
    from harness.cache import cache_root

    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(cache_root()))
    dev = phone(tmp_path, "phone", **{"ro.soc.model": "SM1234", "ro.product.cpu.abi": "x86_64"})
    try:
        pytester.makepyfile(test_u="""
            def test_a(hil_device):
                pass

            def test_b(hil_device):
                pass
        """)
        result = pytester.runpytest(f"--device={dev.serial}", "--runner=python")
    finally:
        drop(dev)
    result.assert_outcomes(errors=2)
    text = result.stdout.str()
    # Once per test (the short summary cuts it before this), not once more chained.
    # (the short summary repeats it in full when $CI is set, so count the errors section)
    assert text.split("short test summary info")[0].count("SoC SM1234 has no config") == 2
    assert text.count("HIL device unavailable: device ") == 4  # 2 reports + 2 summary lines
    assert "Known SoCs: SM8550, SM8650, SM8750" in text
