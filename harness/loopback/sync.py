"""The `sync:` service (file transfer) of the loopback adbd, protocol v1.

After `OPEN sync:` the stream carries binary requests: a 4-byte id, a u32 little-endian length
and, for path requests, that many bytes of UTF-8 path. Implemented:

* STAT path -> `STAT` mode size mtime (all u32; all zero when the path does not exist, which is
  how clients detect a missing file: v1 STAT has no error field).
* LIST path -> one `DENT` mode size mtime namelen name per entry, then `DONE` + 16 zero bytes.
* SEND "path,mode" -> then the host sends `DATA` len bytes (<= 64 KiB each) ... `DONE` mtime;
  we answer `OKAY` 0, or `FAIL` len message. Parent directories are created
  (the `fixed_push_mkdir` behaviour). A symlink mode means the single DATA is the link target.
* RECV path -> `DATA` chunks then `DONE` 0, or `FAIL` len message (e.g. missing file).
* QUIT -> the session ends and the stream is closed.

The v2 variants (STA2/LST2/LIS2/SND2/RCV2) are not implemented, so the device does not advertise
`stat_v2`/`ls_v2`/`sendrecv_v2`; clients then stick to v1.

Paths: `/data...` and `/sdcard...` map into the sandbox; other absolute paths are the host's and
are read-only (as /system is on a phone) so a push can never write outside the sandbox.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import stat
import struct
from pathlib import Path

from harness.errors import HarnessError

from .protocol import StreamClosed, StreamLike

log = logging.getLogger(__name__)

# Device path roots that live in the sandbox; shell.py rewrites the same roots in commands.
MAPPED_ROOTS = ("/data", "/sdcard")

SYNC_DATA_MAX = 64 * 1024
MAX_PATH = 1024
# Batch outgoing sync data up to this size per write (a few WRTE payloads' worth).
_FLUSH_AT = 4 * SYNC_DATA_MAX

_REQ = struct.Struct("<4sI")
_STAT = struct.Struct("<4sIII")
_DENT = struct.Struct("<4sIIII")


class SyncProtocolError(HarnessError):
    """The host sent something that is not a valid v1 sync request."""


def map_device_path(sandbox: Path, device_path: str) -> tuple[str, bool]:
    """Translate a device path to a host path; also say whether writes are allowed there.

    The path is normalised first so `/data/../etc` cannot escape into a writable mapping.
    Relative paths are taken relative to the device root, like adbd's cwd of `/`.
    """
    path = posixpath.normpath("/" + device_path.lstrip("/")) if device_path else "/"
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    for root in MAPPED_ROOTS:
        if path == root or path.startswith(root + "/"):
            return str(sandbox).rstrip("/") + path, True
    return path, False


def _parse_mode(text: str) -> int:
    """strtoul(text, 0): decimal, 0-prefixed octal or 0x-prefixed hex."""
    text = text.strip()
    if text.lower().startswith("0x"):
        return int(text, 16)
    if len(text) > 1 and text.startswith("0"):
        return int(text, 8)
    return int(text or "0", 10)


def _u32(value: float) -> int:
    return int(value) & 0xFFFFFFFF


def _fail(stream: StreamLike, message: str) -> None:
    data = message.encode("utf-8", "replace")
    stream.write(_REQ.pack(b"FAIL", len(data)) + data)


def _strerror(exc: OSError) -> str:
    return exc.strerror or os.strerror(exc.errno or errno.EIO)


def serve(stream: StreamLike, sandbox: Path) -> None:
    """Answer sync requests until QUIT, an error, or the host closing the stream."""
    try:
        while _handle_one(stream, sandbox):
            pass
    except StreamClosed:
        pass
    except SyncProtocolError as exc:
        log.debug("sync: %s", exc)
        try:
            _fail(stream, str(exc))
        except StreamClosed:
            pass
    finally:
        stream.close()


def _handle_one(stream: StreamLike, sandbox: Path) -> bool:
    """Handle one request; False ends the session (QUIT or a failure, as adbd does)."""
    req_id, length = _REQ.unpack(stream.read_exact(_REQ.size))
    if req_id == b"QUIT":
        return False
    if length > MAX_PATH:
        raise SyncProtocolError("path too long")
    raw_path = stream.read_exact(length).decode("utf-8", "surrogateescape")
    log.debug("sync: %s %r", req_id.decode("ascii", "replace"), raw_path)
    if req_id == b"STAT":
        return _do_stat(stream, sandbox, raw_path)
    if req_id == b"LIST":
        return _do_list(stream, sandbox, raw_path)
    if req_id == b"SEND":
        return _do_send(stream, sandbox, raw_path)
    if req_id == b"RECV":
        return _do_recv(stream, sandbox, raw_path)
    raise SyncProtocolError(f"unknown command {req_id!r}")


def _do_stat(stream: StreamLike, sandbox: Path, device_path: str) -> bool:
    host_path, _ = map_device_path(sandbox, device_path)
    try:
        # lstat like adbd; but like the kernel, a trailing slash follows a symlink and demands a
        # directory (the adb client stats "link/" to learn whether a symlink points to a dir).
        if device_path.endswith("/") and host_path != "/":
            st = os.stat(host_path)
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        else:
            st = os.lstat(host_path)
        reply = _STAT.pack(b"STAT", _u32(st.st_mode), _u32(st.st_size), _u32(st.st_mtime))
    except OSError:
        reply = _STAT.pack(b"STAT", 0, 0, 0)
    stream.write(reply)
    return True


def _do_list(stream: StreamLike, sandbox: Path, device_path: str) -> bool:
    host_path, _ = map_device_path(sandbox, device_path)
    out = bytearray()
    try:
        names = [".", ".."] + sorted(os.listdir(host_path))
    except OSError:
        names = []
    for name in names:
        try:
            st = os.lstat(os.path.join(host_path, name))
        except OSError:
            continue
        encoded = name.encode("utf-8", "surrogateescape")
        out += _DENT.pack(b"DENT", _u32(st.st_mode), _u32(st.st_size), _u32(st.st_mtime), len(encoded))
        out += encoded
        if len(out) >= SYNC_DATA_MAX:
            stream.write(bytes(out))
            out.clear()
    out += _DENT.pack(b"DONE", 0, 0, 0, 0)
    stream.write(bytes(out))
    return True


def _read_data_header(stream: StreamLike) -> tuple[bytes, int]:
    return _REQ.unpack(stream.read_exact(_REQ.size))


def _drain_until_done(stream: StreamLike) -> None:
    """After a failed SEND, swallow the rest of the upload so the host sees our FAIL."""
    while True:
        msg_id, length = _read_data_header(stream)
        if msg_id != b"DATA":
            return
        stream.read_exact(length)


def _do_send(stream: StreamLike, sandbox: Path, spec: str) -> bool:
    path_part, comma, mode_part = spec.rpartition(",")
    if not comma:
        _fail(stream, "missing , in ID_SEND")
        return False
    try:
        mode = _parse_mode(mode_part)
    except ValueError:
        _fail(stream, "bad mode")
        return False
    host_path, writable = map_device_path(sandbox, path_part)
    if not writable:
        _fail(stream, f"couldn't create file: Read-only file system ({path_part})")
        _drain_until_done(stream)
        return False
    if stat.S_ISLNK(mode):
        return _send_link(stream, host_path)
    return _send_file(stream, host_path, mode, path_part)


def _send_link(stream: StreamLike, host_path: str) -> bool:
    msg_id, length = _read_data_header(stream)
    if msg_id != b"DATA":
        _fail(stream, "invalid data message: expected ID_DATA")
        return False
    target = stream.read_exact(length).split(b"\0", 1)[0]
    try:
        if os.path.lexists(host_path):
            os.unlink(host_path)
        os.makedirs(os.path.dirname(host_path), exist_ok=True)
        os.symlink(target, host_path)
    except OSError as exc:
        _fail(stream, f"symlink failed: {_strerror(exc)}")
        _drain_until_done(stream)
        return False
    msg_id, mtime = _read_data_header(stream)
    if msg_id != b"DONE":
        _fail(stream, "invalid data message: expected ID_DONE")
        return False
    try:
        os.utime(host_path, (mtime, mtime), follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass
    stream.write(_REQ.pack(b"OKAY", 0))
    return True


def _send_file(stream: StreamLike, host_path: str, mode: int, device_path: str) -> bool:
    # adbd copies the user permission bits to group and other.
    perms = mode & 0o777
    perms |= (perms >> 3) & 0o070
    perms |= (perms >> 3) & 0o007
    try:
        if os.path.islink(host_path) or os.path.isfile(host_path):
            os.unlink(host_path)
        os.makedirs(os.path.dirname(host_path), exist_ok=True)
        fd = os.open(host_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, perms)
    except OSError as exc:
        _fail(stream, f"couldn't create file: {_strerror(exc)} ({device_path})")
        _drain_until_done(stream)
        return False
    ok = False
    try:
        with os.fdopen(fd, "wb") as f:
            while True:
                msg_id, length = _read_data_header(stream)
                if msg_id == b"DONE":
                    mtime = length
                    break
                if msg_id != b"DATA":
                    _fail(stream, "invalid data message")
                    return False
                f.write(stream.read_exact(length))
        os.chmod(host_path, perms)
        os.utime(host_path, (mtime, mtime))
        ok = True
    except OSError as exc:
        _fail(stream, f"write failed: {_strerror(exc)}")
        _drain_until_done(stream)
        return False
    finally:
        if not ok:
            try:
                os.unlink(host_path)
            except OSError:
                pass
    stream.write(_REQ.pack(b"OKAY", 0))
    return True


def _do_recv(stream: StreamLike, sandbox: Path, device_path: str) -> bool:
    host_path, _ = map_device_path(sandbox, device_path)
    try:
        f = open(host_path, "rb")  # noqa: SIM115 -- closed by `with f:` below, after the FAIL path
    except OSError as exc:
        _fail(stream, f"open failed: {_strerror(exc)}")
        return False
    # Several DATA packets (and the final DONE) go out in one write: fewer WRTE round trips, and
    # no small trailing segment for Nagle on the adb server's side to hold back.
    out = bytearray()
    with f:
        while True:
            try:
                chunk = f.read(SYNC_DATA_MAX)
            except OSError as exc:
                if out:
                    stream.write(bytes(out))
                _fail(stream, f"read failed: {_strerror(exc)}")
                return False
            if not chunk:
                break
            out += _REQ.pack(b"DATA", len(chunk)) + chunk
            if len(out) >= _FLUSH_AT:
                stream.write(bytes(out))
                out.clear()
    out += _REQ.pack(b"DONE", 0)
    stream.write(bytes(out))
    return True
