"""A small adbd in Python: a stand-in Android device the real adb server can `adb connect` to.

No phone can exist on the CI machines, yet the harness must exercise its real adb code paths
(adb server, `adb shell`, `adb push/pull`, adbutils). `LoopbackDevice` listens on a loopback TCP
port and speaks the adb transport protocol (CNXN / OPEN / OKAY / WRTE / CLSE, see
`protocol.py`) exactly like adbd on a device in `adb tcpip` mode, without AUTH.

Services (everything else is refused with CLSE, as adbd does for unknown services):

* `shell:<cmd>`, `exec:<cmd>` - raw output, no exit code (`shell.py`)
* `shell,v2[,...]:<cmd>` - shell protocol v2 with separate stdout/stderr and the exit code
* `sync:` - STAT/LIST/SEND/RECV/QUIT file transfer, v1 (`sync.py`)

Device filesystem - a deliberately narrow mapping:

* `/data/...` and `/sdcard/...` live in `<sandbox>/data/...` and `<sandbox>/sdcard/...`.
  Sync requests map these paths directly. Shell command lines are rewritten textually: each
  `/data` or `/sdcard` that starts a word, or follows `=`, `:`, a quote, `(`, a redirection or
  a command separator, and is followed by `/` or a word end, is replaced by the sandbox path
  (so `LD_LIBRARY_PATH=/data/local/tmp:$LD_LIBRARY_PATH` and `--pte=/data/x` map; `/database`
  and `/foo/data` do not). Paths computed at run time inside a program are NOT mapped; use
  relative paths or $EXTERNAL_STORAGE/$TMPDIR for those.
* Everything else (/proc, /bin, /usr, /tmp, ...) is the host's own. Pushes outside the mapped
  roots fail with "Read-only file system" so nothing is written outside the sandbox.
* Shell commands run with `/bin/sh -c` in `<sandbox>` (the device's `/`), with the host
  environment plus `extra_env`, and `<sandbox>/.bin` (getprop, setprop, logcat, getenforce)
  first on PATH.

arm64 mode (`ro.product.cpu.abi=arm64-v8a`): the device stands in for an arm64 phone. Every
program a shell command starts by path goes through `<sandbox>/.bin/loopback-exec`, which runs
an aarch64 ELF under `qemu-aarch64 -L /usr/aarch64-linux-gnu` and anything else directly
(`emulation.py`); `ro.product.cpu.abilist`/`abilist64` report arm64-v8a. The default (x86_64)
mode runs commands exactly as written.

Threads: one acceptor, one reader per connection, one per open stream (plus I/O pumps for
shell). The adb flow control is honoured in both directions: we send the next WRTE of a stream
only after the host's OKAY, and acknowledge a host WRTE only once the service consumed it.
"""

from __future__ import annotations

import collections
import ipaddress
import itertools
import logging
import socket
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from collections.abc import Callable

from . import emulation, protocol, shell, sync
from .protocol import Message, ProtocolError, StreamClosed

log = logging.getLogger(__name__)

DEFAULT_PROPERTIES: dict[str, str] = {
    "ro.soc.model": "SM8650",
    "ro.board.platform": "pineapple",
    "ro.product.model": "Loopback SM8650",
    "ro.product.name": "loopback",
    "ro.product.device": "loopback",
    "ro.product.cpu.abi": "x86_64",
    "ro.build.version.release": "14",
    "ro.build.version.sdk": "34",
    "ro.hardware": "qcom",
}

# Only what is implemented: shell v2, cmd (exec: works), parent-dir creation on push, and
# symlink mtimes on push. No stat_v2/ls_v2/sendrecv_v2, so clients use sync v1.
FEATURES = ["shell_v2", "cmd", "fixed_push_mkdir", "fixed_push_symlink_timestamp"]

# How long closing a stream waits for the host to acknowledge our last WRTE.
_FINAL_ACK_TIMEOUT = 5.0


def _check_loopback(host: str) -> str:
    """Resolve `host` and insist it is a loopback address: this fake device must never be
    reachable from the network (it runs arbitrary commands without authentication)."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"host must be a loopback IP address, got {host!r}") from None
    if not addr.is_loopback:
        raise ValueError(f"refusing to bind non-loopback address {host!r}")
    return str(addr)


class Stream:
    """One adb stream (local id <-> remote id) inside a connection, with adb flow control."""

    def __init__(self, conn: Connection, local_id: int, remote_id: int) -> None:
        self.conn = conn
        self.local_id = local_id
        self.remote_id = remote_id
        self._cv = threading.Condition()
        self._inbox: collections.deque[bytes] = collections.deque()
        self._pending = bytearray()
        self._can_send = True  # OPEN's OKAY lets us send the first WRTE right away
        self._closed = False
        self._peer_closed = False
        self._write_lock = threading.Lock()

    # --- called from the connection reader thread -------------------------------------------

    def deliver(self, data: bytes) -> None:
        """Queue a host WRTE; it is acknowledged when the service reads it."""
        with self._cv:
            if self._closed or self._peer_closed:
                return
            self._inbox.append(data)
            self._cv.notify_all()

    def on_ack(self) -> None:
        """The host consumed our last WRTE; the next one may go."""
        with self._cv:
            self._can_send = True
            self._cv.notify_all()

    def on_peer_close(self) -> None:
        """Host sent CLSE or the connection died: wake every waiter."""
        with self._cv:
            self._peer_closed = True
            self._cv.notify_all()

    # --- service side (StreamLike) -------------------------------------------------------------

    @property
    def closed_by_peer(self) -> bool:
        """True once the host closed the stream or the connection went away."""
        return self._peer_closed

    def read(self) -> bytes:
        """Next host chunk; b"" when the stream is closed and nothing is left."""
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            return data
        return self._next_chunk()

    def read_exact(self, n: int) -> bytes:
        """Exactly n bytes across WRTE boundaries, or StreamClosed."""
        while len(self._pending) < n:
            chunk = self._next_chunk()
            if not chunk:
                raise StreamClosed(f"stream closed with {len(self._pending)}/{n} bytes read")
            self._pending += chunk
        data = bytes(self._pending[:n])
        del self._pending[:n]
        return data

    def _next_chunk(self) -> bytes:
        """Pop one queued WRTE payload and only now acknowledge it (backpressure)."""
        with self._cv:
            while not self._inbox and not (self._peer_closed or self._closed):
                self._cv.wait()
            if not self._inbox:
                return b""
            data = self._inbox.popleft()
            ack = not (self._peer_closed or self._closed)
        if ack:
            try:
                self.conn.send(protocol.A_OKAY, self.local_id, self.remote_id)
            except StreamClosed:
                pass
        return data

    def write(self, data: bytes) -> None:
        """Send data as WRTEs of at most the negotiated payload, each after the previous OKAY."""
        view = memoryview(data)
        with self._write_lock:
            while view:
                chunk = bytes(view[: self.conn.max_payload])
                view = view[len(chunk):]
                with self._cv:
                    while not self._can_send and not (self._peer_closed or self._closed):
                        self._cv.wait()
                    if self._peer_closed or self._closed:
                        raise StreamClosed("stream closed")
                    self._can_send = False
                self.conn.send(protocol.A_WRTE, self.local_id, self.remote_id, chunk)

    def close(self) -> None:
        """Close our side after the host acknowledged everything we wrote; idempotent."""
        with self._write_lock, self._cv:
            if self._closed:
                return
            self._cv.wait_for(lambda: self._can_send or self._peer_closed, _FINAL_ACK_TIMEOUT)
            self._closed = True
            peer_closed = self._peer_closed
            self._cv.notify_all()
        if not peer_closed:
            try:
                self.conn.send(protocol.A_CLSE, self.local_id, self.remote_id)
            except StreamClosed:
                pass
        self.conn.forget(self.local_id)


class Connection:
    """One TCP connection from the adb server: handshake, stream table, message dispatch."""

    def __init__(self, device: LoopbackDevice, sock: socket.socket, peer: str) -> None:
        self.device = device
        self.sock = sock
        self.peer = peer
        self.max_payload = protocol.MAX_PAYLOAD
        self._send_lock = threading.Lock()
        self._streams: dict[int, Stream] = {}
        self._streams_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._dead = False

    def send(self, command: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        """Write one message; StreamClosed if the connection is gone."""
        packet = protocol.encode(command, arg0, arg1, data)
        with self._send_lock:
            if self._dead:
                raise StreamClosed("connection closed")
            try:
                self.sock.sendall(packet)
            except OSError as exc:
                raise StreamClosed(f"connection lost: {exc}") from exc

    def forget(self, local_id: int) -> None:
        """Drop a finished stream from the table."""
        with self._streams_lock:
            self._streams.pop(local_id, None)

    def _stream(self, local_id: int) -> Stream | None:
        with self._streams_lock:
            return self._streams.get(local_id)

    def serve(self) -> None:
        """Reader loop: runs until the peer disconnects or the device stops."""
        try:
            while True:
                msg = protocol.read_message(self.sock)
                if msg is None:
                    break
                log.debug("%s <- %r", self.peer, msg)
                self._dispatch(msg)
        except (OSError, ProtocolError, StreamClosed) as exc:
            if not self.device.stopping:
                log.debug("%s: connection ended: %s", self.peer, exc)
        finally:
            self.shutdown()
            self.device._forget_connection(self)

    def shutdown(self) -> None:
        """Close the socket and tell every stream its peer is gone."""
        with self._send_lock:
            self._dead = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        with self._streams_lock:
            streams = list(self._streams.values())
            self._streams.clear()
        for stream in streams:
            stream.on_peer_close()

    def _dispatch(self, msg: Message) -> None:
        cmd = msg.command
        if cmd == protocol.A_CNXN:
            self.max_payload = max(4096, min(protocol.MAX_PAYLOAD, msg.arg1 or protocol.MAX_PAYLOAD))
            banner = protocol.connect_banner(self.device.properties, FEATURES)
            self.send(protocol.A_CNXN, protocol.A_VERSION, protocol.MAX_PAYLOAD, banner)
        elif cmd == protocol.A_OPEN:
            self._open(msg.arg0, msg.data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape"))
        elif cmd == protocol.A_OKAY:
            stream = self._stream(msg.arg1)
            if stream is not None:
                stream.on_ack()
        elif cmd == protocol.A_WRTE:
            stream = self._stream(msg.arg1)
            if stream is not None:
                stream.deliver(msg.data)
            else:
                self.send(protocol.A_CLSE, 0, msg.arg0)
        elif cmd == protocol.A_CLSE:
            with self._streams_lock:
                stream = self._streams.pop(msg.arg1, None)
            if stream is not None:
                stream.on_peer_close()
        else:
            # AUTH/STLS/SYNC: we never ask for them, so there is nothing sensible to answer.
            log.debug("%s: ignoring %r", self.peer, msg)

    def _open(self, remote_id: int, service: str) -> None:
        handler = self.device._service_handler(service)
        if handler is None or remote_id == 0:
            log.info("refusing service %r", service)
            self.send(protocol.A_CLSE, 0, remote_id)
            return
        local_id = next(self._ids)
        stream = Stream(self, local_id, remote_id)
        with self._streams_lock:
            self._streams[local_id] = stream
        self.send(protocol.A_OKAY, local_id, remote_id)

        def run() -> None:
            try:
                handler(stream)
            except StreamClosed:
                pass
            except Exception:  # a service bug must not take the device down
                log.exception("service %r failed", service)
            finally:
                stream.close()

        threading.Thread(target=run, name=f"loopback-{service.split(':', 1)[0]}", daemon=True).start()


class LoopbackDevice:
    """A fake Android device on 127.0.0.1 that the real adb server can attach to.

    Use as a context manager or call start()/stop(). The sandbox directory is the device's
    filesystem for `/data` and `/sdcard` (see the module docstring for the exact mapping).
    """

    def __init__(
        self,
        sandbox: Path | str | None = None,
        properties: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self._host = _check_loopback(host)
        self._requested_port = port
        self._tmpdir: tempfile.TemporaryDirectory | None = None
        if sandbox is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="loopback-adbd-")
            sandbox = self._tmpdir.name
        self.sandbox = Path(sandbox).resolve()
        shell.check_sandbox_path(self.sandbox)
        self.properties: dict[str, str] = {**DEFAULT_PROPERTIES, **(properties or {})}
        self.arm64 = emulation.is_arm64_mode(self.properties)
        if self.arm64:
            self.properties = emulation.arm64_properties(self.properties)
        self._launcher: str | None = None
        self.extra_env = dict(extra_env or {})
        self.stopping = False
        self._listener: socket.socket | None = None
        self._port = 0
        self._accept_thread: threading.Thread | None = None
        self._connections: set[Connection] = set()
        self._lock = threading.Lock()
        self._processes = shell.ProcessRegistry()
        self._env: dict[str, str] = {}

    # --- lifecycle --------------------------------------------------------------------------

    def start(self) -> LoopbackDevice:
        """Prepare the sandbox, bind the port and start serving in background threads."""
        if self._listener is not None:
            return self
        for sub in ("data/local/tmp", "data/tombstones", "sdcard"):
            (self.sandbox / sub).mkdir(parents=True, exist_ok=True)
        shell.install_tools(self.sandbox, self.properties)
        if self.arm64:
            qemu = emulation.find_qemu()
            if qemu is None:
                log.warning("arm64 mode without qemu-aarch64: pushed aarch64 programs will "
                            "fail to start (apt-get install qemu-user)")
            self._launcher = str(emulation.install_launcher(self.sandbox, qemu))
        self._env = shell.build_env(self.sandbox, self.extra_env)
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((self._host, self._requested_port))
            listener.listen(16)
        except OSError:
            listener.close()
            raise
        listener.settimeout(0.2)
        self._listener = listener
        self._port = listener.getsockname()[1]
        self.stopping = False
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name=f"loopback-adbd-{self._port}", daemon=True
        )
        self._accept_thread.start()
        log.info("loopback device listening on %s (sandbox %s)", self.serial, self.sandbox)
        return self

    def set_clock_offset(self, seconds: int) -> None:
        """Set the device's wall clock `seconds` away from the host's (its `date`; a phone's
        clock jumps so after NTP or NITZ). Its uptime (`/proc/uptime`) is the host's and never
        jumps, as a phone's monotonic clock does not."""
        (self.sandbox / shell.CLOCK_OFFSET_FILE).write_text(f"{int(seconds)}\n")

    def stop(self) -> None:
        """Vanish like an unplugged phone: close the listener and every connection, kill every
        command still running. Idempotent."""
        self.stopping = True
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except OSError:
                pass
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=2)
            self._accept_thread = None
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            conn.shutdown()
        self._processes.kill_all()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> LoopbackDevice:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- identity ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port (0 before start())."""
        return self._port

    @property
    def host(self) -> str:
        """The loopback address we listen on."""
        return self._host

    @property
    def serial(self) -> str:
        """The adb serial of this device once connected: "127.0.0.1:<port>"."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._listener is not None

    def __repr__(self) -> str:
        return f"LoopbackDevice(serial={self.serial!r}, sandbox={str(self.sandbox)!r})"

    # --- internals --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self.stopping:
            listener = self._listener
            if listener is None:
                break
            try:
                sock, addr = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            if self.stopping:
                sock.close()
                break
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, f"{addr[0]}:{addr[1]}")
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=conn.serve, name=f"loopback-conn-{addr[1]}", daemon=True).start()

    def _forget_connection(self, conn: Connection) -> None:
        with self._lock:
            self._connections.discard(conn)

    def _service_handler(self, service: str) -> Callable[[Stream], None] | None:
        """Pick the handler for an OPEN request; None means "refuse with CLSE"."""
        if service.startswith("sync:"):
            return lambda stream: sync.serve(stream, self.sandbox)
        request = shell.parse_service(service)
        if request is not None:
            return lambda stream: shell.run_shell(
                stream, request, sandbox=self.sandbox, env=self._env, registry=self._processes,
                launcher=self._launcher,
            )
        return None
