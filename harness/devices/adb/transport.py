"""Every adb call of the harness: `AdbProxy`, one device's calls through the adb server, and
beneath it the hot calls on adbutils' connections, without adbutils' per-call costs.

`AdbProxy` (in the manner of Mobly's) is what the device, its identification, its fork server
and its lease use: shell commands, streams, pushes and the server's view of the device. A call
that fails raises one `AdbError(cmd, stdout, stderr, returncode, serial)`, a DeviceError whose
message says which adb call failed, what adb said, and what to check.

Measured on the loopback device through the real adb server (see DESIGN.md and
benchmarks/adb_path.py), a `device.shell2("true")` of adbutils 2.12 takes about 23 ms where the
same service takes 2 ms: adbutils asks the server's version on a connection of its own before
every transport (`host:version`), and its `AdbConnection.close()` sleeps 10 ms after shutting
the socket down; a `sync.push` makes a STAT connection before its SEND one, and writes each DATA
header and its payload separately, so without TCP_NODELAY the payload waits for the delayed ACK
of the header (84 ms a 1 KB push; 43 ms with TCP_NODELAY).

So:

- `HarnessAdbClient` is adbutils' client with TCP_NODELAY on every connection it makes and the
  server version asked once per client (it cannot change under a running server); every adbutils
  call of the harness goes through it;
- `shell_v2` runs one command over the shell protocol v2 (exit code, separate stdout/stderr,
  stdin with an end), `ShellStream` is the same as a stream (a run's output while it runs), and
  `push_files` sends any number of files in one `sync:` session. They open the device's transport
  with `host:transport:<serial>` on a connection of the client (no version query) and close the
  socket at once once the device has closed the stream (nothing is left to flush).

Beneath the proxy, errors are adbutils' (`adbutils.AdbError` for a refusal of the server or the
device, e.g. "device '...' not found") or `OSError` (a cut connection, `socket.timeout`), as
from adbutils itself; the proxy turns each into an `AdbError`.

Callers quote every argument of a shell command with `shlex.quote`: serials, paths and model
names are untrusted input.
"""

from __future__ import annotations

import datetime
import shlex
import socket
import stat
import struct
import time
from pathlib import Path

from harness.devices.adb.address import adb_server_address, check_environment
from harness.errors import DeviceError

check_environment()  # before adbutils, which reads ANDROID_ADB_SERVER_PORT when imported
import adbutils  # noqa: E402

# Shell protocol v2 packet ids (adb's shell_protocol.h): a 1-byte id and a u32 LE length.
ID_STDIN, ID_STDOUT, ID_STDERR, ID_EXIT, ID_CLOSE_STDIN = 0, 1, 2, 3, 4
_PACKET = struct.Struct("<BI")
# adbd rejects a shell packet larger than its buffer; the smallest adbd has used is 4 KiB.
STDIN_CHUNK = 4096 - _PACKET.size
SYNC_CHUNK = 64 * 1024  # the sync protocol's largest DATA payload
_SYNC = struct.Struct("<4sI")


def set_nodelay(connection) -> None:
    """TCP_NODELAY on an adbutils connection's socket: small writes go out at once."""
    try:
        connection.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, adbutils.AdbError):
        pass


def quick_ack(sock: socket.socket) -> None:
    """Acknowledge what arrives next at once (Linux's TCP_QUICKACK, which lasts until the
    kernel next decides to delay: set before every read). The adb server writes a device's
    output to its client with Nagle's algorithm on, so a second small write (a server's next
    reply line, a runner's next event) waits for the client's acknowledgement of the first,
    which Linux delays by up to 40 ms when the client has nothing to send: measured on the
    loopback device, the second of two lines written 3 ms apart arrived after 44 ms, with this
    after 4 ms."""
    if hasattr(socket, "TCP_QUICKACK"):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass


class HarnessAdbClient(adbutils.AdbClient):
    """adbutils' client with TCP_NODELAY on its connections and the server version cached."""

    _server_version: int | None = None

    def make_connection(self, timeout: float | None = None):
        connection = super().make_connection(timeout=timeout)
        set_nodelay(connection)
        return connection

    def server_version(self) -> int:
        if self._server_version is None:
            self._server_version = super().server_version()
        return self._server_version


def close_now(connection) -> None:
    """Close an adbutils connection's socket without adbutils' 10 ms shutdown wait."""
    try:
        connection.conn.close()
    except (OSError, adbutils.AdbError):
        pass


def open_service(client: adbutils.AdbClient, serial: str, service: str,
                 timeout: float | None):
    """A connection to `service` on device `serial`, through the adb server."""
    connection = client.make_connection(timeout=timeout)
    set_nodelay(connection)
    try:
        connection.send_command(f"host:transport:{serial}")
        connection.check_okay()
        connection.send_command(service)
        connection.check_okay()
    except BaseException:
        close_now(connection)
        raise
    return connection


def data_packets(data: bytes) -> bytes:
    """`data` as shell-v2 stdin packets, each small enough for any adbd."""
    out = bytearray()
    for i in range(0, len(data), STDIN_CHUNK):
        chunk = data[i:i + STDIN_CHUNK]
        out += _PACKET.pack(ID_STDIN, len(chunk)) + chunk
    return bytes(out)


def stdin_packets(data: bytes) -> bytes:
    """`data` as shell-v2 stdin packets followed by the end of stdin."""
    return data_packets(data) + _PACKET.pack(ID_CLOSE_STDIN, 0)


class ShellStream:
    """One `shell,v2,raw:` command as a stream: stdin is sent whole (then closed) at the start,
    or, with `stdin=None`, kept open for `send` (a server reading requests from it);
    `read(timeout)` returns the next stdout/stderr data as it comes."""

    def __init__(self, client: adbutils.AdbClient, serial: str, command: str,
                 stdin: bytes | None = b"", timeout: float | None = None) -> None:
        self.connection = open_service(client, serial, f"shell,v2,raw:{command}", timeout)
        self.exit_code: int | None = None
        self.closed = False  # the device ended the stream (exit packet or EOF)
        self._buffer = bytearray()
        if stdin is not None:
            try:
                self.connection.conn.sendall(stdin_packets(stdin))
            except BaseException:
                self.close()
                raise

    def send(self, data: bytes) -> None:
        """More of the command's stdin (a stream opened with `stdin=None`)."""
        self.socket.sendall(data_packets(data))

    @property
    def socket(self) -> socket.socket:
        return self.connection.conn

    def read(self, timeout: float | None) -> tuple[bytes, bytes]:
        """(stdout, stderr) that arrived within `timeout` seconds (socket.timeout when none
        did); both empty once the stream has ended (`closed`)."""
        if self.closed:
            return b"", b""
        self.socket.settimeout(timeout)
        quick_ack(self.socket)
        data = self.socket.recv(256 * 1024)
        if not data:
            self.closed = True
            return b"", b""
        self._buffer += data
        out, err = bytearray(), bytearray()
        while len(self._buffer) >= _PACKET.size:
            packet_id, length = _PACKET.unpack_from(self._buffer)
            if len(self._buffer) < _PACKET.size + length:
                break
            payload = bytes(self._buffer[_PACKET.size:_PACKET.size + length])
            del self._buffer[:_PACKET.size + length]
            if packet_id == ID_STDOUT:
                out += payload
            elif packet_id == ID_STDERR:
                err += payload
            elif packet_id == ID_EXIT:
                self.exit_code = payload[0] if payload else 255
                self.closed = True
                break
        return bytes(out), bytes(err)

    def close(self) -> None:
        close_now(self.connection)


def shell_v2(client: adbutils.AdbClient, serial: str, command: str, *, stdin: bytes = b"",
             timeout: float | None = 60.0) -> tuple[int, bytes, bytes]:
    """Run `command` on the device: (exit code, stdout, stderr). `timeout` bounds each wait
    for data (socket.timeout past it)."""
    stream = ShellStream(client, serial, command, stdin, timeout)
    out, err = bytearray(), bytearray()
    try:
        while not stream.closed:
            o, e = stream.read(timeout)
            out += o
            err += e
    finally:
        stream.close()
    if stream.exit_code is None:
        raise adbutils.AdbError(f"the shell stream of `{command[:80]}` ended without an exit "
                                "status")
    return stream.exit_code, bytes(out), bytes(err)


def push_files(client: adbutils.AdbClient, serial: str,
               files: list[tuple[Path, str, int]], timeout: float | None = 300.0) -> None:
    """Push every (local file, remote path, mode) in one `sync:` session (SEND, DATA..., DONE,
    then the device's OKAY, per file). The device creates missing parent directories. Raises
    AdbError naming the file on the device's FAIL."""
    if not files:
        return
    connection = open_service(client, serial, "sync:", timeout)
    try:
        sock = connection.conn
        for local, remote, mode in files:
            spec = f"{remote},{stat.S_IFREG | mode}".encode()
            out = bytearray(_SYNC.pack(b"SEND", len(spec)) + spec)
            with open(local, "rb") as f:
                while True:
                    chunk = f.read(SYNC_CHUNK)
                    if not chunk:
                        break
                    out += _SYNC.pack(b"DATA", len(chunk)) + chunk
                    if len(out) >= 4 * SYNC_CHUNK:
                        sock.sendall(out)
                        out.clear()
            mtime = int(datetime.datetime.now().timestamp())
            out += _SYNC.pack(b"DONE", mtime)
            sock.sendall(out)
            try:
                reply, length = _SYNC.unpack(connection.read_exact(_SYNC.size))
                message = (connection.read_exact(length).decode("utf-8", "replace")
                           if reply == b"FAIL" else f"unexpected reply {reply!r}")
            except EOFError:
                reply, message = b"", "the device closed the sync session"
            if reply != b"OKAY":
                raise adbutils.AdbError(f"push of {local} to {remote} failed: {message}")
        sock.sendall(_SYNC.pack(b"QUIT", 0))
    finally:
        close_now(connection)


def adb_client(server: str | None = None) -> HarnessAdbClient:
    """The adb server to talk to (see adb_server_address): adbutils' client with TCP_NODELAY on
    its connections and the server version asked once (`HarnessAdbClient`)."""
    host, port = adb_server_address(server)
    return HarnessAdbClient(host=host, port=port)


class AdbError(DeviceError):
    """An adb call that failed: `cmd` (the shell command, or the adb service the call used),
    what it printed, its exit status (None when it never got one: the adb server or the device
    refused the call, or the connection was cut) and the device's `serial`. `during` says what
    the harness was doing, where that says more than the command."""

    def __init__(self, cmd: str, stdout: str = "", stderr: str = "",
                 returncode: int | None = None, serial: str = "", *, server: str = "",
                 during: str = "") -> None:
        self.cmd = cmd
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = returncode
        self.serial = serial
        self.server = server
        self.during = during
        super().__init__(self.describe())

    @property
    def reason(self) -> str:
        """What adb said, in a line (or the exit status when it said nothing)."""
        said = (self.stderr or self.stdout).strip()
        if said:
            return said[-1000:]
        return "no answer" if self.returncode is None else f"exit status {self.returncode}"

    def describe(self) -> str:
        command = self.cmd if len(self.cmd) <= 80 else self.cmd[:77] + "..."
        doing = f"{self.during}: " if self.during else ""
        status = "" if self.returncode is None else f" (exit status {self.returncode})"
        server = f" of the adb server at {self.server}" if self.server else ""
        return (f"{self.serial}: {doing}adb `{command}` failed{status}: {self.reason}; check "
                f"that `adb -s {shlex.quote(self.serial)} get-state` answers `device`{server}, "
                "and reconnect or replug the device if it does not")

    def while_(self, during: str) -> AdbError:
        """The same failure, saying what the harness was doing (unless that was the command)."""
        said = during.strip("`") in self.cmd
        return AdbError(self.cmd, self.stdout, self.stderr, self.returncode, self.serial,
                        server=self.server, during="" if said else during)


class AdbProxy:
    """One device's adb calls through one adb server; a failed call raises AdbError."""

    def __init__(self, client: HarnessAdbClient, serial: str) -> None:
        self.client = client
        self.serial = serial

    @property
    def server(self) -> str:
        return f"{self.client.host}:{self.client.port}"

    def _error(self, cmd: str, exc: BaseException) -> AdbError:
        return AdbError(cmd, "", str(exc) or type(exc).__name__, None, self.serial,
                        server=self.server)

    # Commands --------------------------------------------------------------------------------
    def shell(self, command: str, *, stdin: bytes = b"",
              timeout: float | None = 60.0) -> tuple[int, bytes, bytes]:
        """`command` (already quoted) over the shell protocol v2: (exit code, stdout, stderr).
        A command that exits non-zero is returned, not raised: its caller reads the code."""
        try:
            return shell_v2(self.client, self.serial, command, stdin=stdin, timeout=timeout)
        except (adbutils.AdbError, OSError) as exc:
            raise self._error(f"shell {command}", exc) from exc

    def sh(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        """`shell`, as (exit code, stdout then stderr as text)."""
        code, out, err = self.shell(command, timeout=timeout)
        return code, (out + err).decode("utf-8", errors="replace")

    def stream(self, command: str, stdin: bytes | None = b"",
               timeout: float | None = None) -> ShellStream:
        """`command` as a stream (ShellStream): its output as it comes."""
        try:
            return ShellStream(self.client, self.serial, command, stdin, timeout)
        except (adbutils.AdbError, OSError) as exc:
            raise self._error(f"shell {command}", exc) from exc

    def push(self, files: list[tuple[Path, str, int]]) -> None:
        """Every (local file, remote path, mode) in one sync session."""
        try:
            push_files(self.client, self.serial, files)
        except (adbutils.AdbError, OSError) as exc:
            names = ", ".join(remote for _, remote, _ in files[:4])
            raise self._error(f"push {names}" + (" ..." if len(files) > 4 else ""),
                              exc) from exc

    # The adb server's view of the device -----------------------------------------------------
    def features(self) -> str:
        """The device's adbd features, comma-separated (`adb features`)."""
        try:
            return self.client.device(self.serial).get_features()
        except (adbutils.AdbError, OSError) as exc:
            raise self._error("features", exc) from exc

    def state(self) -> str:
        """The adb server's state of the device ("device" when usable)."""
        try:
            return self.client.device(self.serial).get_state()
        except (adbutils.AdbError, OSError) as exc:
            raise self._error("get-state", exc) from exc

    def online(self) -> bool:
        try:
            return self.state() == "device"
        except AdbError:
            return False

    def connect(self, timeout: float) -> str:
        """`adb connect` a host:port device: the server's answer."""
        try:
            return (self.client.connect(self.serial, timeout=timeout) or "").strip()
        except (adbutils.AdbError, OSError) as exc:
            raise self._error(f"connect {self.serial}", exc) from exc

    def disconnect(self) -> None:
        try:
            self.client.disconnect(self.serial)
        except (adbutils.AdbError, OSError) as exc:
            raise self._error(f"disconnect {self.serial}", exc) from exc

    def wait_online(self, window: float, poll_s: float = 0.5) -> None:
        """Wait up to `window` seconds for the adb server to report the device as "device".

        A `host:port` device is `adb connect`ed again on every try whatever the last answer was
        ("Connection refused" while a phone reboots says nothing about a second later); when
        the server still holds a dead transport ("already connected" but offline) it is
        disconnected first, which is faster than the server's own reconnect back-off. Raises
        DeviceError saying how long it waited, how many connects it tried, what adb said last
        and the last state."""
        serial = self.serial
        started = time.monotonic()
        deadline = started + window
        tries, answer = 0, ""
        while True:
            state = self._state_or_error()
            if state == "device":
                return
            remaining = deadline - time.monotonic()
            if ":" in serial and remaining > 0:
                tries += 1
                answer = self._connect_answer(timeout=max(1.0, min(5.0, remaining)))
                if "already connected" in answer:
                    self.disconnect()
                    answer = self._connect_answer(timeout=max(1.0, min(5.0, remaining)))
                if answer.startswith("connected to") or "already connected" in answer:
                    # The transport needs a moment for its handshake before it reads "device".
                    settle = min(2.0, max(0.0, deadline - time.monotonic()))
                    end = time.monotonic() + settle
                    while time.monotonic() < end:
                        state = self._state_or_error()
                        if state == "device":
                            return
                        time.sleep(0.05)
            if time.monotonic() >= deadline:
                break
            time.sleep(max(0.0, min(poll_s, deadline - time.monotonic())))
        waited = time.monotonic() - started
        said = (f"; {tries} `adb connect` attempt(s), adb's last answer: {answer!r}"
                if ":" in serial else "")
        raise DeviceError(f"device {serial} is not online after waiting {waited:.1f} s "
                          f"(window {window:g} s){said}; last state: {state}; check `adb "
                          f"devices` (adb server {self.server})")

    def _state_or_error(self) -> str:
        """The device's state, or what adb said instead."""
        try:
            return self.state()
        except AdbError as exc:
            return exc.stderr

    def _connect_answer(self, timeout: float) -> str:
        try:
            return self.connect(timeout)
        except AdbError as exc:
            return exc.stderr
