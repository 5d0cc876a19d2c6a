"""The `shell:` / `shell,v2:` / `exec:` services of the loopback adbd.

Commands run as `/bin/sh -c <cmd>` on the host, with the sandbox root as working directory
(standing in for the device's `/`), in their own session so that the whole process group can be
killed when the host closes the stream or the device is stopped.

Two wire formats exist, chosen by the service name the host opens:

* raw (`shell:<cmd>`, `exec:<cmd>`): stdout and stderr are merged into one byte stream and no
  exit code is reported; the stream simply closes when the command is done. This is what
  adbutils' `device.shell()` uses.
* shell protocol v2 (`shell,v2[,raw|pty][,TERM=...]:<cmd>`): both directions carry packets of
  1-byte id + u32 little-endian length + payload. Ids: 0 stdin, 1 stdout, 2 stderr, 3 exit
  (payload: one byte exit code), 4 close-stdin, 5 window-size change (ignored here). This is
  what `adb shell` uses when the device advertises `shell_v2`, and it is how the exit code
  reaches the host. `pty` is accepted but treated as raw: there is no terminal here.

Device paths: only `/data` and `/sdcard` are redirected into the sandbox, by textual rewriting
of the command (see `rewrite_command`). Everything else (/proc, /bin, /usr, ...) is the host's.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import shlex
import struct
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from harness.process import piped

from .emulation import wrap_programs
from .protocol import StreamClosed, StreamLike
from .sync import MAPPED_ROOTS

log = logging.getLogger(__name__)

ID_STDIN = 0
ID_STDOUT = 1
ID_STDERR = 2
ID_EXIT = 3
ID_CLOSE_STDIN = 4
ID_WINDOW_SIZE = 5

_PACKET_HEADER = struct.Struct("<BI")
_READ_SIZE = 64 * 1024

# A mapped root is rewritten only where a shell word (or an assignment / PATH-like list element
# / quoted string / redirection target) starts, and only when the root is complete: `/data` or
# `/data/...`, never `/database` or `/foo/data`.
_ROOTS_ALT = "|".join(re.escape(r) for r in MAPPED_ROOTS)
_REWRITE_RE = re.compile(
    r"(?<![^\s=:'\"`(<>|&;])(" + _ROOTS_ALT + r")(?=[/\s'\"`:;|&)<>]|$)"
)

# Characters a sandbox path may contain so that splicing it unquoted into a command is safe.
_SAFE_PATH_RE = re.compile(r"^[A-Za-z0-9_./+@%,-]+$")


def encode_packet(packet_id: int, data: bytes = b"") -> bytes:
    """Frame one shell-protocol v2 packet."""
    return _PACKET_HEADER.pack(packet_id, len(data)) + data


def decode_packets(buf: bytearray) -> list[tuple[int, bytes]]:
    """Pop every complete v2 packet off the front of `buf` (in place); keep any partial tail."""
    out: list[tuple[int, bytes]] = []
    while len(buf) >= _PACKET_HEADER.size:
        packet_id, length = _PACKET_HEADER.unpack_from(buf)
        end = _PACKET_HEADER.size + length
        if len(buf) < end:
            break
        out.append((packet_id, bytes(buf[_PACKET_HEADER.size:end])))
        del buf[:end]
    return out


@dataclass(frozen=True)
class ShellRequest:
    """What the host asked for: the command and which wire format to answer in."""

    command: str
    v2: bool = False
    pty: bool = False
    term: str | None = None


def parse_service(service: str) -> ShellRequest | None:
    """Parse `shell[,arg...]:cmd` or `exec:cmd`; None if `service` is not a shell service.

    Args the real client sends include `v2`, `raw`, `pty` and `TERM=<name>`; unknown ones are
    ignored like adbd does.
    """
    if service.startswith("exec:"):
        return ShellRequest(command=service[len("exec:"):])
    if not service.startswith("shell"):
        return None
    rest = service[len("shell"):]
    if rest.startswith(":"):
        return ShellRequest(command=rest[1:])
    if not rest.startswith(","):
        return None
    head, sep, command = rest[1:].partition(":")
    if not sep:
        return None
    v2 = pty = False
    term = None
    for arg in head.split(","):
        if arg == "v2":
            v2 = True
        elif arg == "pty":
            pty = True
        elif arg == "raw":
            pty = False
        elif arg.startswith("TERM="):
            term = arg[len("TERM="):]
    return ShellRequest(command=command, v2=v2, pty=pty, term=term)


def check_sandbox_path(sandbox: Path) -> None:
    """Refuse sandbox paths that cannot be spliced unquoted into shell commands."""
    if not _SAFE_PATH_RE.match(str(sandbox)):
        raise ValueError(
            f"sandbox path {str(sandbox)!r} contains characters that would break shell commands "
            "after /data and /sdcard are rewritten to it; use a path of [A-Za-z0-9_./+@%,-]"
        )


def rewrite_command(sandbox: Path, command: str) -> str:
    """Point `/data...` and `/sdcard...` in a command line at the sandbox.

    Only occurrences at the start of a word or after `=`, `:`, a quote, `(`, a redirection or a
    command separator are rewritten, so `LD_LIBRARY_PATH=/data/x:$LD_LIBRARY_PATH`,
    `--model=/data/x` and `'/sdcard/a b'` all map, while `/database` or `/foo/data` do not.
    """
    root = str(sandbox).rstrip("/")
    return _REWRITE_RE.sub(lambda m: root + m.group(1), command)


def build_env(sandbox: Path, extra_env: dict[str, str] | None) -> dict[str, str]:
    """Environment for device commands: host env + extra_env, device tools first on PATH.

    extra_env is exported as-is so `LD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH prog` in a command still
    sees the simulator's libraries appended. TMPDIR and EXTERNAL_STORAGE mimic Android's.
    """
    env = dict(os.environ)
    env.setdefault("TMPDIR", str(sandbox / "data" / "local" / "tmp"))
    env["EXTERNAL_STORAGE"] = str(sandbox / "sdcard")
    env["ANDROID_DATA"] = str(sandbox / "data")
    if extra_env:
        env.update(extra_env)
    tools = str(sandbox / ".bin")
    env["PATH"] = tools + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    return env


_GETPROP = r"""#!/bin/sh
# getprop for the loopback device: properties live in a "[key]: [value]" file, like Android prints.
props=__PROPS__
if [ $# -eq 0 ]; then
    cat "$props"
    exit 0
fi
while IFS= read -r line; do
    case "$line" in
        "[$1]: ["*)
            v=${line#"[$1]: ["}
            printf '%s\n' "${v%]}"
            exit 0;;
    esac
done < "$props"
if [ $# -ge 2 ]; then printf '%s\n' "$2"; else echo; fi
"""

_SETPROP = r"""#!/bin/sh
# setprop for the loopback device: rewrite the property file (not persisted across restarts).
props=__PROPS__
if [ $# -ne 2 ]; then echo "usage: setprop NAME VALUE" >&2; exit 1; fi
tmp="$props.$$"
{ grep -v -F "[$1]: [" "$props"; printf '[%s]: [%s]\n' "$1" "$2"; } | sort > "$tmp" && mv "$tmp" "$props"
"""

_LOGCAT = r"""#!/bin/sh
# logcat for the loopback device: -c clears __LOG__, anything else dumps it and exits (never follows).
log=__LOG__
for a in "$@"; do
    if [ "$a" = "-c" ]; then : > "$log"; exit 0; fi
done
[ -f "$log" ] && cat "$log"
exit 0
"""

_GETENFORCE = """#!/bin/sh
echo Permissive
"""

# date for the loopback device: its wall clock, set apart from the host's by the offset in
# __OFFSET__ (seconds; what NTP/NITZ or a user does to a phone's clock: `set_clock_offset`).
_DATE = r"""#!/bin/sh
off=$(cat __OFFSET__ 2>/dev/null)
case "$off" in ''|0) exec /bin/date "$@";; *[!0-9-]*) exec /bin/date "$@";; esac
exec /bin/date -d "@$(( $(/bin/date +%s) + off ))" "$@"
"""


CLOCK_OFFSET_FILE = ".clock_offset"


def format_properties(properties: dict[str, str]) -> str:
    """Render properties the way Android's `getprop` prints them (sorted `[k]: [v]` lines)."""
    return "".join(f"[{k}]: [{v}]\n" for k, v in sorted(properties.items()))


def install_tools(sandbox: Path, properties: dict[str, str]) -> None:
    """Write the property file and the small device tools into `<sandbox>/.bin`.

    Scripts are plain sh so they work whatever Python the harness runs under.
    """
    bin_dir = sandbox / ".bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    props = sandbox / ".props"
    props.write_text(format_properties(properties))
    logfile = sandbox / "logcat.txt"
    scripts = {
        "getprop": _GETPROP.replace("__PROPS__", shlex.quote(str(props))),
        "setprop": _SETPROP.replace("__PROPS__", shlex.quote(str(props))),
        "logcat": _LOGCAT.replace("__LOG__", shlex.quote(str(logfile))),
        "getenforce": _GETENFORCE,
        "date": _DATE.replace("__OFFSET__", shlex.quote(str(sandbox / CLOCK_OFFSET_FILE))),
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


@dataclass
class ProcessRegistry:
    """Live shell processes, so that stopping the device can kill every one of them."""

    _procs: set[subprocess.Popen] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, proc: subprocess.Popen) -> None:
        """Track a started process."""
        with self._lock:
            self._procs.add(proc)

    def discard(self, proc: subprocess.Popen) -> None:
        """Forget a process that has been reaped."""
        with self._lock:
            self._procs.discard(proc)

    def kill_all(self) -> None:
        """SIGKILL the process group of every live process (they run in their own sessions)."""
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a shell and everything it spawned; harmless if it already exited."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def exit_status(returncode: int) -> int:
    """Map Popen's return code to what a shell reports: signals become 128 + signo."""
    if returncode < 0:
        return 128 + (-returncode)
    return returncode & 0xFF


def run_shell(
    stream: StreamLike,
    request: ShellRequest,
    *,
    sandbox: Path,
    env: dict[str, str],
    registry: ProcessRegistry,
    launcher: str | None = None,
) -> None:
    """Run one shell request to completion, relaying I/O over `stream`, then close it.

    `launcher` (arm64 mode, see emulation.py): put before every program the command starts by
    path, so pushed aarch64 programs run under qemu-aarch64."""
    command = rewrite_command(sandbox, request.command)
    if launcher:
        command = wrap_programs(command, launcher)
    argv = ["/bin/sh", "-c", command] if command.strip() else ["/bin/sh"]
    if request.term:
        env = {**env, "TERM": request.term}
    log.debug("shell%s: %s", ",v2" if request.v2 else "", command)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=str(sandbox),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if request.v2 else subprocess.STDOUT,
            start_new_session=True,
            bufsize=0,
        )
    except OSError as exc:
        _report_spawn_failure(stream, request, exc)
        return
    registry.add(proc)
    try:
        _relay(stream, request, proc)
    finally:
        kill_group(proc)
        proc.wait()
        registry.discard(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        stream.close()


def _report_spawn_failure(stream: StreamLike, request: ShellRequest, exc: OSError) -> None:
    """Tell the host the command could not start, in whichever format it expects."""
    message = f"/bin/sh: {exc}\n".encode()
    try:
        if request.v2:
            stream.write(encode_packet(ID_STDERR, message) + encode_packet(ID_EXIT, b"\x7f"))
        else:
            stream.write(message)
    except StreamClosed:
        pass
    stream.close()


def _relay(stream: StreamLike, request: ShellRequest, proc: subprocess.Popen) -> None:
    """Pump stdin from the host and stdout/stderr to it until the process's output ends."""
    stdin_thread = threading.Thread(
        target=_pump_stdin, args=(stream, request, proc), name="loopback-shell-stdin", daemon=True
    )
    stdin_thread.start()

    host_gone = threading.Event()

    def pump_output(pipe, packet_id: int) -> None:
        fd = pipe.fileno()
        while True:
            try:
                data = os.read(fd, _READ_SIZE)
            except OSError:
                return
            if not data:
                return
            if host_gone.is_set():
                continue  # keep draining so the child never blocks on a full pipe
            try:
                stream.write(encode_packet(packet_id, data) if request.v2 else data)
            except StreamClosed:
                host_gone.set()
                kill_group(proc)

    err_thread = None
    if request.v2:
        err_thread = threading.Thread(
            target=pump_output, args=(proc.stderr, ID_STDERR), name="loopback-shell-stderr", daemon=True
        )
        err_thread.start()
    pump_output(proc.stdout, ID_STDOUT)
    if err_thread is not None:
        err_thread.join()
    returncode = proc.wait()
    if request.v2 and not host_gone.is_set():
        try:
            stream.write(encode_packet(ID_EXIT, bytes([exit_status(returncode)])))
        except StreamClosed:
            pass


def _pump_stdin(stream: StreamLike, request: ShellRequest, proc: subprocess.Popen) -> None:
    """Feed host data to the child's stdin; kill the child if the host closes the stream."""
    stdin = piped(proc.stdin)
    buf = bytearray()
    stdin_open = True

    def close_stdin() -> None:
        nonlocal stdin_open
        if stdin_open:
            stdin_open = False
            try:
                stdin.close()
            except OSError:
                pass

    def feed(data: bytes) -> None:
        if not stdin_open:
            return
        try:
            stdin.write(data)
        except (BrokenPipeError, ValueError, OSError):
            close_stdin()

    while True:
        data = stream.read()
        if not data:
            break
        if not request.v2:
            feed(data)
            continue
        buf.extend(data)
        for packet_id, payload in decode_packets(buf):
            if packet_id == ID_STDIN:
                feed(payload)
            elif packet_id == ID_CLOSE_STDIN:
                close_stdin()
            # ID_WINDOW_SIZE and anything unknown: nothing to do without a pty.
    close_stdin()
    if stream.closed_by_peer:
        # Like adbd: the host hung up (Ctrl-C, timeout), so the command must not outlive it.
        kill_group(proc)
