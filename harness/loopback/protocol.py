"""Encoding and decoding of adb transport messages (the packets between adb server and adbd).

Every message is a 24-byte header of six little-endian u32 words followed by an optional
payload:

    command, arg0, arg1, data_length, data_checksum, magic (= command ^ 0xffffffff)

The checksum is the plain byte sum of the payload. Since protocol version 0x01000001 both sides
may skip verifying it, so we always send a correct one but never reject a wrong one; the magic
word is what tells us the stream is still in sync, so that one is checked.

This module has no I/O policy of its own beyond `read_message`, which the connection handler
uses on a blocking socket.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Protocol

from harness.errors import HarnessError

HEADER = struct.Struct("<6I")
HEADER_SIZE = HEADER.size  # 24


def _cmd(name: bytes) -> int:
    """Pack a 4-letter command name into its little-endian u32 code."""
    return int.from_bytes(name, "little")


A_SYNC = _cmd(b"SYNC")
A_CNXN = _cmd(b"CNXN")
A_OPEN = _cmd(b"OPEN")
A_OKAY = _cmd(b"OKAY")
A_CLSE = _cmd(b"CLSE")
A_WRTE = _cmd(b"WRTE")
A_AUTH = _cmd(b"AUTH")
A_STLS = _cmd(b"STLS")

COMMAND_NAMES = {
    A_SYNC: "SYNC",
    A_CNXN: "CNXN",
    A_OPEN: "OPEN",
    A_OKAY: "OKAY",
    A_CLSE: "CLSE",
    A_WRTE: "WRTE",
    A_AUTH: "AUTH",
    A_STLS: "STLS",
}

# Protocol version that lets both ends skip the checksum; what modern adbd sends.
A_VERSION = 0x01000001
# Largest payload we accept; the host's CNXN may lower what we send (we use the minimum).
MAX_PAYLOAD = 256 * 1024
# Sanity bound on what we are willing to read from the wire for a single message.
MAX_ACCEPTED_PAYLOAD = 16 * 1024 * 1024


class ProtocolError(HarnessError):
    """The peer sent bytes that are not a valid adb message (bad magic, absurd length)."""


class StreamClosed(Exception):
    """The stream (or its whole connection) is gone; the service should stop."""


class StreamLike(Protocol):
    """What a service sees of one adb stream: a flow-controlled, bidirectional byte pipe."""

    @property
    def closed_by_peer(self) -> bool:
        """True once the host sent CLSE (or the connection died)."""
        ...

    def read(self) -> bytes:
        """Next chunk the host wrote; b"" once the stream is closed."""
        ...

    def read_exact(self, n: int) -> bytes:
        """Exactly n bytes, or StreamClosed."""
        ...

    def write(self, data: bytes) -> None:
        """Send data to the host (blocks on flow control), or StreamClosed."""
        ...

    def close(self) -> None:
        """Flush and close our side; idempotent."""
        ...


@dataclass(frozen=True)
class Message:
    """One decoded adb transport message."""

    command: int
    arg0: int
    arg1: int
    data: bytes = b""

    @property
    def name(self) -> str:
        """Readable command name for logs ("WRTE", or hex if unknown)."""
        return COMMAND_NAMES.get(self.command, f"0x{self.command:08x}")

    def __repr__(self) -> str:
        preview = self.data[:40]
        return f"Message({self.name}, {self.arg0}, {self.arg1}, {preview!r}{'...' if len(self.data) > 40 else ''})"


def checksum(data: bytes) -> int:
    """Byte sum of the payload, truncated to u32 (the legacy adb data checksum)."""
    return sum(data) & 0xFFFFFFFF


def encode(command: int, arg0: int, arg1: int, data: bytes = b"") -> bytes:
    """Serialise one message (header + payload) ready to be written to the socket."""
    header = HEADER.pack(
        command & 0xFFFFFFFF,
        arg0 & 0xFFFFFFFF,
        arg1 & 0xFFFFFFFF,
        len(data),
        checksum(data),
        (command ^ 0xFFFFFFFF) & 0xFFFFFFFF,
    )
    return header + bytes(data)


def decode_header(header: bytes) -> tuple[int, int, int, int, int]:
    """Parse a 24-byte header into (command, arg0, arg1, data_length, data_checksum).

    Raises ProtocolError if the magic word does not match the command, or the length is absurd,
    because either means the byte stream is out of sync and nothing after it can be trusted.
    """
    if len(header) != HEADER_SIZE:
        raise ProtocolError(f"short header: {len(header)} bytes")
    command, arg0, arg1, length, check, magic = HEADER.unpack(header)
    if magic != (command ^ 0xFFFFFFFF):
        raise ProtocolError(f"bad magic 0x{magic:08x} for command 0x{command:08x}")
    if length > MAX_ACCEPTED_PAYLOAD:
        raise ProtocolError(f"payload length {length} too large")
    return command, arg0, arg1, length, check


def decode(buf: bytes) -> Message:
    """Decode one complete message from `buf` (header plus exactly its payload)."""
    command, arg0, arg1, length, _check = decode_header(buf[:HEADER_SIZE])
    data = buf[HEADER_SIZE:]
    if len(data) != length:
        raise ProtocolError(f"payload is {len(data)} bytes, header says {length}")
    return Message(command, arg0, arg1, bytes(data))


def _quickack(sock: socket.socket) -> None:
    """Ask Linux to ACK immediately. The adb server writes a message's header and payload
    separately with Nagle enabled, so a delayed ACK from us would stall every payload ~40 ms."""
    if _TCP_QUICKACK is not None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)
        except OSError:
            pass


_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """Read exactly n bytes; None on orderly EOF before the first byte."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = sock.recv(n - got)
        _quickack(sock)
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"connection closed mid-message ({got}/{n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_message(sock: socket.socket) -> Message | None:
    """Block until one whole message arrives; None when the peer closed the connection."""
    header = _recv_exact(sock, HEADER_SIZE)
    if header is None:
        return None
    command, arg0, arg1, length, _check = decode_header(header)
    data = b""
    if length:
        payload = _recv_exact(sock, length)
        if payload is None:
            raise ProtocolError("connection closed before payload")
        data = payload
    return Message(command, arg0, arg1, data)


def connect_banner(properties: dict[str, str], features: list[str]) -> bytes:
    """The CNXN payload adbd sends: system identity plus the feature list.

    The adb server shows product/model/device in `adb devices -l` and decides which protocol
    variants (shell v2, ...) to use from `features`.
    """
    parts = [
        f"ro.product.name={properties.get('ro.product.name', '')}",
        f"ro.product.model={properties.get('ro.product.model', '')}",
        f"ro.product.device={properties.get('ro.product.device', '')}",
        f"features={','.join(features)}",
    ]
    return ("device::" + ";".join(parts)).encode()
