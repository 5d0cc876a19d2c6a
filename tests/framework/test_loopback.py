"""Tests of the loopback adbd against the REAL adb server and client (and adbutils).

The loopback device is what every CI run uses in place of a phone, so it is tested through the
same tools the harness uses: `adb connect`, `adb shell`, `adb push/pull`, adbutils.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.loopback import LoopbackDevice, connect, disconnect
from harness.loopback import protocol, shell, sync

ADB = shutil.which("adb")
needs_adb = pytest.mark.skipif(ADB is None, reason="adb client binary not installed (apt install adb)")

REPO_ROOT = Path(__file__).resolve().parents[2]


def _adb(*args: str, input: bytes | None = None, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [ADB, *args],
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )


def _client():
    import adbutils

    return adbutils.AdbClient(host="127.0.0.1", port=5037)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory):
    """One connected loopback device shared by the module's tests."""
    if ADB is None:
        pytest.skip("adb client binary not installed (apt install adb)")
    subprocess.run([ADB, "start-server"], check=True, capture_output=True, timeout=30)
    sandbox = tmp_path_factory.mktemp("loopback_sandbox")
    device = LoopbackDevice(
        sandbox,
        properties={"ro.test.marker": "hello world"},
        extra_env={"LOOPBACK_TEST_VAR": "42", "LD_LIBRARY_PATH": "/opt/simlibs"},
    ).start()
    try:
        connect(device.serial, adb=ADB)
        yield device
    finally:
        disconnect(device.serial, adb=ADB, missing_ok=True)
        device.stop()


@pytest.fixture(scope="module")
def adb_device(loopback):
    return _client().device(loopback.serial)


# --- protocol units (no adb needed) -----------------------------------------------------------


def test_encode_header_layout_checksum_and_magic():
    packet = protocol.encode(protocol.A_WRTE, 7, 9, b"\x01\x02\xff")
    assert len(packet) == protocol.HEADER_SIZE + 3
    cmd, arg0, arg1, length, check, magic = protocol.HEADER.unpack(packet[:24])
    assert cmd == int.from_bytes(b"WRTE", "little")
    assert (arg0, arg1, length) == (7, 9, 3)
    assert check == 1 + 2 + 255
    assert magic == cmd ^ 0xFFFFFFFF
    msg = protocol.decode(packet)
    assert (msg.command, msg.arg0, msg.arg1, msg.data) == (protocol.A_WRTE, 7, 9, b"\x01\x02\xff")
    assert msg.name == "WRTE"


def test_decode_rejects_bad_magic_but_tolerates_bad_checksum():
    packet = bytearray(protocol.encode(protocol.A_OKAY, 1, 2, b"xy"))
    packet[16:20] = (12345).to_bytes(4, "little")  # wrong checksum: accepted (v0x01000001)
    assert protocol.decode(bytes(packet)).data == b"xy"
    packet[20:24] = (0).to_bytes(4, "little")  # wrong magic: stream out of sync
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(bytes(packet))
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_header(b"short")


def test_read_message_over_socketpair():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(protocol.encode(protocol.A_OPEN, 5, 0, b"shell:echo\0") + protocol.encode(protocol.A_CLSE, 1, 2))
        a.shutdown(socket.SHUT_WR)
        first = protocol.read_message(b)
        assert first.command == protocol.A_OPEN and first.data == b"shell:echo\0"
        assert protocol.read_message(b).command == protocol.A_CLSE
        assert protocol.read_message(b) is None


def test_connect_banner_carries_identity_and_features():
    banner = protocol.connect_banner(
        {"ro.product.name": "n", "ro.product.model": "m", "ro.product.device": "d"},
        ["shell_v2", "cmd"])
    assert banner == b"device::ro.product.name=n;ro.product.model=m;ro.product.device=d;features=shell_v2,cmd"


def test_shell_packets_and_service_parsing():
    buf = bytearray(shell.encode_packet(shell.ID_STDIN, b"abc") + shell.encode_packet(shell.ID_CLOSE_STDIN))
    buf += shell.encode_packet(shell.ID_STDOUT, b"partial")[:4]
    assert shell.decode_packets(buf) == [(0, b"abc"), (4, b"")]
    assert len(buf) == 4  # the incomplete packet stays buffered
    assert shell.parse_service("shell:ls -l") == shell.ShellRequest("ls -l")
    req = shell.parse_service("shell,v2,TERM=xterm-256color,raw:echo a:b")
    assert req == shell.ShellRequest("echo a:b", v2=True, term="xterm-256color")
    assert shell.parse_service("exec:cat x") == shell.ShellRequest("cat x")
    assert shell.parse_service("sync:") is None
    assert shell.parse_service("shellfoo:x") is None


def test_path_mapping_is_narrow():
    sb = Path("/sb")
    rw = shell.rewrite_command
    assert rw(sb, "cat /data/local/tmp/x") == "cat /sb/data/local/tmp/x"
    assert rw(sb, "LD_LIBRARY_PATH=/data/a:/sdcard/b:$LD_LIBRARY_PATH ./p") == (
        "LD_LIBRARY_PATH=/sb/data/a:/sb/sdcard/b:$LD_LIBRARY_PATH ./p"
    )
    assert rw(sb, "ls '/sdcard' \"/data/x y\" >/data/o") == "ls '/sb/sdcard' \"/sb/data/x y\" >/sb/data/o"
    assert rw(sb, "ls /database /foo/data /proc/cpuinfo") == "ls /database /foo/data /proc/cpuinfo"
    assert sync.map_device_path(sb, "/data/local/tmp/f") == ("/sb/data/local/tmp/f", True)
    assert sync.map_device_path(sb, "/sdcard") == ("/sb/sdcard", True)
    assert sync.map_device_path(sb, "/data/../etc/passwd") == ("/etc/passwd", False)
    assert sync.map_device_path(sb, "/proc/cpuinfo") == ("/proc/cpuinfo", False)


def test_refuses_non_loopback_bind(tmp_path):
    with pytest.raises(ValueError):
        LoopbackDevice(tmp_path, host="0.0.0.0")
    with pytest.raises(ValueError):
        LoopbackDevice(tmp_path, host="example.com")


# --- against the real adb server ----------------------------------------------------------------


@needs_adb
def test_adb_shell_echo(loopback):
    proc = _adb("-s", loopback.serial, "shell", "echo", "hi")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"hi\n"


@needs_adb
def test_adb_cli_exit_code_and_stdin(loopback):
    assert _adb("-s", loopback.serial, "shell", "exit 3").returncode == 3
    proc = _adb("-s", loopback.serial, "shell", "cat", input=b"piped via shell v2 stdin")
    assert proc.stdout == b"piped via shell v2 stdin"


@needs_adb
def test_shell_v2_exit_code_and_stderr_separation(adb_device):
    res = adb_device.shell2("exit 3", v2=True)
    assert res.returncode == 3
    res = adb_device.shell2("echo out; echo err >&2; exit 1", v2=True)
    assert (res.stdout, res.stderr, res.returncode) == ("out\n", "err\n", 1)
    # raw shell (v1): merged output, no exit code on the wire
    assert adb_device.shell("echo out; echo err >&2", rstrip=False) == "out\nerr\n"


@needs_adb
def test_getprop(adb_device):
    assert adb_device.prop.get("ro.soc.model") == "SM8650"
    assert adb_device.shell("getprop ro.board.platform") == "pineapple"
    assert adb_device.shell("getprop ro.test.marker") == "hello world"
    assert adb_device.shell("getprop ro.does.not.exist") == ""
    listing = adb_device.shell("getprop")
    assert "[ro.soc.model]: [SM8650]" in listing.splitlines()
    assert adb_device.prop.model == "Loopback SM8650"


@needs_adb
def test_push_pull_roundtrip(adb_device, loopback, tmp_path):
    big = os.urandom(300 * 1024 + 7)
    src = tmp_path / "big.bin"
    src.write_bytes(big)
    adb_device.sync.push(src, "/data/local/tmp/big.bin")
    out = tmp_path / "big.pulled"
    adb_device.sync.pull("/data/local/tmp/big.bin", out)
    assert out.read_bytes() == big

    odd_name = "name with spaces 'single' \"double\".txt"
    odd_src = tmp_path / odd_name
    odd_src.write_bytes(b"odd\n")
    adb_device.sync.push(odd_src, "/data/local/tmp/")  # directory destination: keeps the name
    assert (loopback.sandbox / "data/local/tmp" / odd_name).read_bytes() == b"odd\n"
    odd_out = tmp_path / "odd.pulled"
    adb_device.sync.pull("/data/local/tmp/" + odd_name, odd_out)
    assert odd_out.read_bytes() == b"odd\n"


@needs_adb
def test_adb_cli_push_pull_and_readonly_root(loopback, tmp_path):
    payload = os.urandom(210 * 1024)
    (tmp_path / "cli.bin").write_bytes(payload)
    push = _adb("-s", loopback.serial, "push", str(tmp_path / "cli.bin"), "/sdcard/sub/dir/cli.bin")
    assert push.returncode == 0, push.stderr
    assert (loopback.sandbox / "sdcard/sub/dir/cli.bin").read_bytes() == payload
    pull = _adb("-s", loopback.serial, "pull", "/sdcard/sub", str(tmp_path / "back"))
    assert pull.returncode == 0, pull.stderr
    assert (tmp_path / "back/dir/cli.bin").read_bytes() == payload
    denied = _adb("-s", loopback.serial, "push", str(tmp_path / "cli.bin"), "/system/cli.bin")
    assert denied.returncode != 0 and b"Read-only file system" in denied.stdout + denied.stderr
    missing = _adb("-s", loopback.serial, "pull", "/data/nope.bin", str(tmp_path / "nope"))
    assert missing.returncode != 0 and b"does not exist" in missing.stdout + missing.stderr


@needs_adb
def test_stat_and_list(adb_device):
    info = adb_device.sync.stat("/data/local/tmp/definitely-missing")
    assert info.mode == 0 and info.size == 0 and info.mtime is None
    assert not adb_device.sync.exists("/data/local/tmp/definitely-missing")
    with pytest.raises(Exception, match="No such file"):
        adb_device.sync.read_bytes("/data/local/tmp/definitely-missing")
    adb_device.sync.push(b"12345", "/data/local/tmp/listed.txt")
    names = {e.path: e for e in adb_device.sync.list("/data/local/tmp")}
    assert names["listed.txt"].size == 5


@needs_adb
def test_path_mapping_between_sync_and_shell(adb_device, loopback):
    adb_device.sync.push(b"mapped content\n", "/data/local/tmp/x")
    assert (loopback.sandbox / "data/local/tmp/x").read_bytes() == b"mapped content\n"
    assert adb_device.shell("cat /data/local/tmp/x") == "mapped content"
    assert adb_device.shell("cd /data/local/tmp && cat x") == "mapped content"
    assert adb_device.shell("pwd") == str(loopback.sandbox)
    assert (loopback.sandbox / "data/tombstones").is_dir()
    adb_device.shell("echo made-by-shell > /sdcard/from_shell.txt")
    assert adb_device.sync.read_text("/sdcard/from_shell.txt") == "made-by-shell\n"


@needs_adb
def test_environment_and_tools(adb_device, loopback):
    assert adb_device.shell("echo $LOOPBACK_TEST_VAR") == "42"
    assert adb_device.shell("LD_LIBRARY_PATH=/data/local/tmp/lib:$LD_LIBRARY_PATH; echo $LD_LIBRARY_PATH") == (
        f"{loopback.sandbox}/data/local/tmp/lib:/opt/simlibs"
    )
    (loopback.sandbox / "logcat.txt").write_text("I/qnn: hello\n")
    assert adb_device.shell("logcat -d -v threadtime") == "I/qnn: hello"
    adb_device.shell("logcat -c")
    assert adb_device.shell("logcat -d") == ""


@needs_adb
def test_concurrent_streams(adb_device):
    def run(i: int) -> str:
        return adb_device.shell(f"sleep 1; echo {i}")

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(8)))
    assert results == [str(i) for i in range(8)]
    assert time.monotonic() - start < 6.0  # multiplexed, not serialised (that takes 8 s)


@needs_adb
def test_unknown_service_is_refused_without_harm(adb_device):
    import adbutils

    conn = adb_device.open_transport()
    try:
        conn.send_command("no-such-service:")
        with pytest.raises(adbutils.AdbError):
            conn.check_okay()
    finally:
        conn.close()
    assert adb_device.shell("echo still alive") == "still alive"


@needs_adb
def test_device_vanishes_on_stop(tmp_path):
    import adbutils

    subprocess.run([ADB, "start-server"], check=True, capture_output=True, timeout=30)
    device = LoopbackDevice(tmp_path / "sb").start()
    try:
        connect(device.serial, adb=ADB)
        dev = _client().device(device.serial)
        assert dev.shell("echo up") == "up"
        outcome: dict[str, object] = {}

        def long_running() -> None:
            try:
                outcome["out"] = dev.shell("sleep 30; echo never", timeout=20)
            except Exception as exc:  # noqa: BLE001 -- either an error or an early, empty result is fine
                outcome["exc"] = exc

        worker = threading.Thread(target=long_running)
        worker.start()
        time.sleep(0.3)
        device.stop()
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert outcome.get("out", "") in ("", None)
        deadline = time.monotonic() + 5
        while True:
            try:
                dev.shell("echo after", timeout=5)
            except adbutils.AdbError:
                break
            assert time.monotonic() < deadline, "device still answers after stop()"
            time.sleep(0.1)
        assert _adb("-s", device.serial, "shell", "echo", "x").returncode != 0
    finally:
        disconnect(device.serial, adb=ADB, missing_ok=True)
        device.stop()


@needs_adb
def test_cli_prints_serial_and_disconnects_on_sigterm(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.loopback", "--sandbox", str(tmp_path / "cli"),
         "--prop", "ro.soc.model=SM8750", "--adb", ADB],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("serial: 127.0.0.1:"), proc.stderr.read1().decode() if proc.poll() is not None else line
        serial = line.split()[1]
        assert _adb("-s", serial, "shell", "getprop", "ro.soc.model").stdout == b"SM8750\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert proc.stdout.read() == b""  # exactly one line on stdout
        devices = _adb("devices").stdout.decode()
        assert serial not in devices
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
