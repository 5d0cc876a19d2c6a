"""A lease on a device, so that two sessions never use one phone or board at once.

It talks to the device only through a shell callback (`Run`: a POSIX shell command in, exit
code and output back) and needs nothing but `mkdir`, `mv`, `sed`, `stat`, `/proc/uptime` and
the boot id there, so every device kind with a shell uses it: an adb phone, a Linux board over
ssh. `key` names the device across this process (the adb server and serial, the ssh target).

Where: a directory on the device, by default `/data/local/tmp/.executorch-hil-lease`
(`LEASE_DIR`, Android's; a kind passes its own `lease_dir`), per device and not per workspace,
so two sessions given the same `--device-workspace` are kept apart too. Taking a free one
writes the whole lease (heartbeat and owner) in a directory of its own and renames it into
place, which is atomic on the device's filesystem: of sessions racing for a free device exactly
one gets it, and none ever sees a lease half written. A lease directory without a heartbeat
(another writer's, or one whose writer died while making it) is as old as the directory itself,
never the device's uptime: read so, a lease a millisecond old looked stale under load and a
racer took it over.

Format: in that directory, `owner` holds `key=value` lines written once by the holder (`token`,
`host`, `hostboot` (the holder host's boot id), `pid`, `pidstart` (the process's start time in
the host's clock ticks since boot, so a pid reused by another process is not taken for the
holder), `session`, `worker`, `since`, and after a takeover `took` (the token taken over) and
`tookage` (the heartbeat's age then, in seconds, or `gone` when its process was found gone))
and `heartbeat` holds `<uptime> <boot id>` of the device at the holder's last heartbeat; both
are replaced by rename, so a reader never sees half a file.

Clocks: liveness never reads a wall clock, the device's or a host's. A phone's wall clock jumps
(NTP or NITZ after a reboot, a user setting the date), and a lease read through it let a second
session take over a live lease after a forward jump and blocked the phone after a backward one
("last heartbeat -3598 s ago"). The age of a heartbeat is the device's monotonic uptime
(`/proc/uptime`) now minus at the heartbeat, when the boot id is the same; a heartbeat of an
earlier boot (or of an unreadable or older format) is at least as old as the device's uptime,
since a live holder beats again within `HEARTBEAT_S` of the boot. `since` (display only) is the
device's wall clock.

Heartbeat: a daemon thread per held lease rewrites `heartbeat` every `HEARTBEAT_S` (10 s), only
while `owner` still names this process. When it does not, the lease is lost, and the session is
told how, from what the device holds: taken over (the new owner's `took` names this process,
with the age it saw), removed by someone else (no lease directory or no owner), or rewritten by
someone else (an owner that took nothing over from this process: a hand edit, or a removal
followed by another session taking the free device). A thread rather than a refresh per run, because a live
session can go minutes without a run (compiling models, a hung runner waiting for its timeout,
the device's re-acquire window) and must not look stale meanwhile; and the hot path stays free
of lease work. It costs one shell call every 10 s.

Staleness: a lease whose heartbeat is older than `STALE_S` (120 s, twelve missed heartbeats) is
taken over by the next session that asks, with a notice naming the old holder. A lease whose
holder is a process of this very host (same host name and boot id) that no longer runs (killed
by SIGKILL, the OOM killer, a SIGTERM it could not handle) is taken over at once, with a notice.
A holder of this very host is judged by its pid alone, never by its heartbeat: while that
process runs its lease is held however old (or unreadable: a heartbeat edited by hand read as
old as the device's uptime, and a live session's lease was taken over at once) its heartbeat.
The takeover runs under a second `mkdir` lock (`<lease>.takeover`), checks the condition again
inside it and rewrites the files in place (the directory never disappears, so no `mkdir` can
slip in), so of sessions finding the same stale lease exactly one takes it.

Holder: a process. Its leases carry a token made once per process (`process_token()`), so
sessions inside one process (the framework's own tests, an in-process `pytester` run) share the
lease, counted, and the last one to close releases it. Another process waits up to `--lease-wait`
seconds (polling every `POLL_S`) or fails at once with a `LeaseBusy` naming the holder.

Release: `DeviceLease.release()` (the device's `close()`) removes the directory if it still
names this process; leases still held when the interpreter exits are released then, best effort.
A session killed outright leaves its lease to go stale.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import re
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Callable

from harness.errors import DeviceError

LEASE_DIR = "/data/local/tmp/.executorch-hil-lease"
STALE_S = 120
HEARTBEAT_S = 10.0
POLL_S = 1.0
TAKEOVER_LOCK_STALE_S = 60  # a takeover lock this old was left by a session that died in it
q = shlex.quote

# A shell on the device: run(command, timeout) -> (exit code, output); raises on transport
# errors (AdbError over adb, SshError over ssh: both DeviceErrors), which the lease turns
# into a DeviceError (taking it) or ignores (the heartbeat: the session's own calls re-acquire).
Run = Callable[[str, float], tuple[int, str]]
_TOKEN: tuple[int, str] = (0, "")


def process_token() -> str:
    """This process's lease token (host, pid and a random part; a forked child gets its own)."""
    global _TOKEN
    if _TOKEN[0] != os.getpid():
        _TOKEN = (os.getpid(), f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
    return _TOKEN[1]


def host_boot_id() -> str:
    """This host's boot id (a holder's host is this one only with the same name and boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def pid_start(pid: int | str) -> str:
    """When process `pid` of this host started (clock ticks since boot, /proc/PID/stat field
    22), or "" when unknown: with the pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return ""
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else ""


def pid_alive(pid: str, start: str = "") -> bool:
    """Whether process `pid` of this host runs (a pid this user may not signal runs); with
    `start` (its `pid_start`), a process of that pid started at another time is another."""
    if not pid.isdigit():
        return True  # unknown: never taken for dead
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    now = pid_start(pid) if start.isdigit() else ""
    return not now or now == start


def clean(value: object) -> str:
    """A value safe on one `key=value` line (and readable in a message)."""
    return re.sub(r"[^A-Za-z0-9._:@+/-]", "_", str(value))[:200] or "-"


_clean = clean


def owner_fields(session: str, worker: str) -> dict[str, str]:
    """Who this process is, as a lease's owner file and a workspace's marker name it (without
    its token): host and boot id, pid and its start time, session and worker; values cleaned."""
    return {k: _clean(v) for k, v in (
        ("host", socket.gethostname()), ("hostboot", host_boot_id()), ("pid", os.getpid()),
        ("pidstart", pid_start(os.getpid()) or "-"), ("session", session), ("worker", worker))}


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lease, as its `owner` file says, with the age of its heartbeat."""

    fields: dict

    def get(self, key: str) -> str:
        return self.fields.get(key, "")

    @property
    def age(self) -> int | None:
        text = self.get("age")
        return int(text) if text.isdigit() else None

    @property
    def since_boot(self) -> bool:
        """The heartbeat is of an earlier boot of the device: its age is a lower bound."""
        return self.get("agekind") == "boot"

    def here(self) -> bool:
        """The holder is a process of this host (same host name and boot id)."""
        return (bool(self.get("token")) and self.get("host") == _clean(socket.gethostname())
                and bool(self.get("hostboot")) and self.get("hostboot") == _clean(host_boot_id()))

    def dead_here(self) -> bool:
        """The holder is a process of this host (same name and boot id) that no longer runs."""
        return self.here() and not pid_alive(self.get("pid"), self.get("pidstart"))

    def describe(self) -> str:
        if not self.get("token"):
            return "a session whose lease file is still being written (no owner yet)"
        since = self.get("since")
        when = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(since)))
                if since.isdigit() else "an unknown time")
        age = self.age
        beat = (f"no heartbeat yet, its lease directory {age} s old"
                if self.get("agekind") == "dir" and age is not None else
                f"no heartbeat since the device booted {age} s ago" if self.since_boot and
                age is not None else f"last heartbeat {age} s ago (device uptime)"
                if age is not None else "no heartbeat")
        return (f"host {self.get('host') or '?'} pid {self.get('pid') or '?'} session "
                f"{self.get('session') or '?'} worker {self.get('worker') or '?'}, since {when} "
                f"(device clock; {beat})")


class LeaseBusy(DeviceError):
    """Another session holds the device's lease (and --lease-wait did not outlast it)."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


@dataclasses.dataclass
class _Held:
    """A lease this process holds on one device: how many of its sessions use it, and the
    heartbeat thread that keeps it fresh."""

    run: Run
    release_script: str
    pid: int = dataclasses.field(default_factory=os.getpid)
    count: int = 0
    lost: str = ""
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    thread: threading.Thread | None = None


_HELD: dict[tuple[str, str, str], _Held] = {}  # (device key, serial, token) -> its hold
_LOCK = threading.Lock()


class DeviceLease:
    """The lease of one device for one session (`acquire` once, `release` once)."""

    def __init__(self, key: str, serial: str, run: Run, *, session: str, worker: str,
                 notice: Callable[[str], None] | None = None, stale_s: int | None = None,
                 heartbeat_s: float | None = None, lease_dir: str = LEASE_DIR,
                 token: str | None = None) -> None:
        """`key` names the device across the process (adb server and serial, or the ssh
        target); `run` runs a
        shell command on it without any re-acquire logic (the heartbeat thread uses it too);
        `token` is the holder's identity (default: this process's)."""
        self.serial = serial
        self.run = run
        self.session = session
        self.worker = worker
        self.notice = notice or (lambda line: None)
        self.stale_s = int(STALE_S if stale_s is None else stale_s)
        self.heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
        self.dir = lease_dir
        self.token = token or process_token()
        self.key = (key, serial, self.token)
        self.held = False
        self._entry: _Held | None = None

    # Shell code ------------------------------------------------------------------------------
    def _prelude(self) -> str:
        """Shell functions of every lease script. `ago FILE` prints the age of a `<uptime>
        <boot id>` file in seconds of device uptime (for a file of an earlier boot, or of no
        such format, the uptime itself, with `agekind=boot`); no wall clock is read for it.
        `here` is true when the owner is a process of this host (its name and boot id)."""
        hostboot = _clean(host_boot_id()) if host_boot_id() else ""
        here = ("here() { [ \"$(sed -n 's/^host=//p' \"$L/owner\" 2>/dev/null)\" = "
                f"{q(_clean(socket.gethostname()))} ] && "
                "[ \"$(sed -n 's/^hostboot=//p' \"$L/owner\" 2>/dev/null)\" = "
                f"{q(hostboot)} ]; }}; " if hostboot else "here() { false; }; ")
        return (f"L={q(self.dir)}; T={q(self.token)}; now=$(date +%s); " + here +
                "u=$(cat /proc/uptime 2>/dev/null); up=${u%%[. ]*}; "
                "case \"$up\" in ''|*[!0-9]*) up=0;; esac; "
                "boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); "
                "own() { sed -n 's/^token=//p' \"$L/owner\" 2>/dev/null; }; "
                # The uptime is read again for each age: a heartbeat written after this
                # script read it (another session's, a moment later) is fresh, never "of an
                # earlier boot" (under load a racer's uptime was a second old, the winner's
                # new heartbeat looked newer than now, and the racer took the lease over).
                "ago() { set -- $(cat \"$1\" 2>/dev/null) ''; "
                "case \"$1\" in ''|*[!0-9]*) echo \"$up\"; return;; esac; "
                "nu=$(cat /proc/uptime 2>/dev/null); nu=${nu%%[. ]*}; "
                "case \"$nu\" in ''|*[!0-9]*) nu=$up;; esac; "
                "if [ -n \"$boot\" ] && [ \"$2\" = \"$boot\" ]; then "
                "if [ \"$1\" -le \"$nu\" ]; then echo $((nu - $1)); else echo 0; fi; "
                "else echo \"$nu\"; fi; }; "
                "kind() { set -- $(cat \"$1\" 2>/dev/null) ''; "
                "if [ -n \"$boot\" ] && [ \"$2\" = \"$boot\" ]; then echo beat; "
                "else echo boot; fi; }; "
                # A lease directory without its heartbeat is being written (or its writer died
                # in that moment): its age is the directory's own, never the device's uptime,
                # which made a racer take over a lease a millisecond old.
                "age() { if [ -s \"$L/heartbeat\" ]; then ago \"$L/heartbeat\"; "
                "else dirage \"$L\"; fi; }; "
                "dirage() { a=$((now - $(stat -c %Y \"$1\" 2>/dev/null || echo \"$now\"))); "
                "[ \"$a\" -lt 0 ] && a=0; echo \"$a\"; }; "
                # a takeover lock's age; one without its stamp (its taker died between the
                # mkdir and the stamp) by its directory's time
                "lockage() { if [ -f \"$1/at\" ]; then ago \"$1/at\"; else dirage \"$1\"; fi; }; "
                "stamp() { echo \"$up $boot\" > \"$1.$$\" && mv -f \"$1.$$\" \"$1\"; }; "
                "beat() { stamp \"$L/heartbeat\"; }; "
                "show() { echo \"$1 age=$(age)\"; if [ -s \"$L/heartbeat\" ]; then "
                "echo \"$1 agekind=$(kind \"$L/heartbeat\")\"; else echo \"$1 agekind=dir\"; fi; "
                "sed \"s/^/$1 /\" \"$L/owner\" 2>/dev/null; }; ")

    def _acquire_script(self, dead: str = "") -> str:
        """Take the lease: free, ours, stale, or (with `dead`) held by the token `dead`, a
        process of this host the caller found gone."""
        owner = " ".join(q(f"{k}={v}")
                         for k, v in owner_fields(self.session, self.worker).items())
        stale, lock_stale = self.stale_s, TAKEOVER_LOCK_STALE_S
        # A holder of this host is never taken over for its heartbeat's age: the caller checks
        # its pid and names it in `dead` when that process is gone.
        gone = (f"{{ [ \"$(age)\" -gt {stale} ] && ! here; }} || [ \"$(own)\" = {q(dead)} ]"
                if dead else f"[ \"$(age)\" -gt {stale} ] && ! here")
        why = "gone" if dead else "$(age)"
        # The heartbeat first: whoever reads the new owner reads a fresh heartbeat with it. The
        # token taken over and why go in the owner file, so that holder learns it lost the lease
        # to a takeover (and not to a hand edit).
        take = (f"o=$(own); a={why}; beat && printf '%s\\n' \"token=$T\" {owner} \"since=$now\" "
                "\"took=$o\" \"tookage=$a\" > "
                "\"$L/owner.$$\" && mv -f \"$L/owner.$$\" \"$L/owner\"")
        # A free device: the whole lease (heartbeat and owner) is written in a directory of its
        # own and renamed into place, so no other session ever sees it half written. rename(2)
        # of a directory never replaces a non-empty one, so of racers exactly one lands; `mv`
        # moves a loser's directory into the winner's instead, which the loser removes again.
        publish = (f"n=\"$L.new.$$\"; rm -rf \"$n\"; mkdir \"$n\" && "
                   "echo \"$up $boot\" > \"$n/heartbeat\" && "
                   f"printf '%s\\n' \"token=$T\" {owner} \"since=$now\" > \"$n/owner\" && "
                   "[ ! -e \"$L\" ] && mv \"$n\" \"$L\" 2>/dev/null; "
                   "rm -rf \"$n\" \"$L/${n##*/}\"; [ \"$(own)\" = \"$T\" ]")
        return (self._prelude() +
                f"if [ ! -e \"$L\" ] && {{ {publish}; }}; then echo LEASE taken; "
                "elif [ \"$(own)\" = \"$T\" ]; then beat; echo LEASE ours; "
                f"elif {gone}; then "
                "  t=\"$L.takeover\"; "
                f"  if [ -d \"$t\" ] && [ \"$(lockage \"$t\")\" -gt {lock_stale} ]; then "
                "rm -f \"$t/at\"; rmdir \"$t\" 2>/dev/null; fi; "
                "  if mkdir \"$t\" 2>/dev/null; then stamp \"$t/at\"; "
                f"    if {{ {gone}; }} && [ \"$(own)\" != \"$T\" ]; then "
                f"      show LEASE_OLD; {take} && echo LEASE tookover; "
                "    else show LEASE_HOLDER; echo LEASE held; fi; "
                "    rm -f \"$t/at\"; rmdir \"$t\"; "
                "  else show LEASE_HOLDER; echo LEASE held; fi; "
                "else show LEASE_HOLDER; echo LEASE held; fi")

    def peek(self) -> Holder | None:
        """Who holds the lease now, with its heartbeat's age (None when nobody does), without
        touching it. Raises DeviceError when the device cannot be asked."""
        script = (self._prelude() + "if [ -e \"$L\" ]; then show LEASE_HOLDER; echo LEASE held; "
                  "else echo LEASE free; fi")
        try:
            _, out = self.run(script, 30.0)
        except Exception as exc:  # the transport's: AdbError, SshError (DeviceErrors)
            raise DeviceError(f"{self.serial}: cannot read the device lease: {exc}") from exc
        if "LEASE free" in out:
            return None
        if "LEASE held" not in out:
            raise DeviceError(f"{self.serial}: cannot read the device lease {self.dir}: the "
                              f"device answered {out.strip()[-300:]!r}")
        return Holder(dict(l.split(" ", 1)[1].split("=", 1) for l in out.splitlines()
                           if l.startswith("LEASE_HOLDER ") and "=" in l))

    def owner(self) -> dict[str, str]:
        """This lease's holder as a workspace marker names it (token first)."""
        return {"token": _clean(self.token), **owner_fields(self.session, self.worker)}

    def _heartbeat_script(self) -> str:
        return (self._prelude() + "if [ \"$(own)\" = \"$T\" ]; then beat && echo LEASE beat; "
                "elif [ ! -e \"$L\" ]; then echo LEASE removed; "
                "else show LEASE_HOLDER; echo LEASE lost; fi")

    def _release_script(self) -> str:
        return (self._prelude() + "if [ \"$(own)\" = \"$T\" ]; then "
                "mv \"$L\" \"$L.released.$$\" && rm -rf \"$L.released.$$\"; echo LEASE released; "
                "else echo LEASE notours; fi")

    # Taking, keeping, giving back -------------------------------------------------------------
    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lease (or join this process's), waiting up to `wait_s` seconds for another
        holder to release it or go stale. Raises LeaseBusy naming the holder, or DeviceError
        when the device cannot be asked."""
        started = time.monotonic()
        deadline = started + max(0.0, wait_s)
        waiting_said = False
        while True:
            status, holder, old = self._try()
            if status == "held" and holder.dead_here():
                status, holder, old = self._try(dead=holder.get("token"))
                if status == "tookover":
                    self.notice(f"{self.serial}: took over the lease of {old.describe()} at "
                                "once: that process of this host no longer runs")
                    self._hold()
                    return
            if status in ("taken", "ours", "tookover"):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waited = time.monotonic() - started
                how = (f"waited {waited:.0f} s (--lease-wait {wait_s:g}) without it being released"
                       if wait_s > 0 else "not waiting for it (--lease-wait 0, the default; "
                       "give --lease-wait SECONDS to wait)")
                alive = (f" That process runs on this host, so its lease is kept whatever its "
                         f"heartbeat says (end it, or remove {self.dir} on the device)."
                         if holder.here() else "")
                raise LeaseBusy(
                    f"device {self.serial} is in use by another session: {holder.describe()}; "
                    f"{how}. A lease whose heartbeat is older than {self.stale_s} s is taken "
                    f"over; the lease is {self.dir} on the device.{alive}", holder)
            if not waiting_said:
                waiting_said = True
                self.notice(f"{self.serial}: waiting up to {wait_s:g} s for the lease held by "
                            f"{holder.describe()}")
            time.sleep(min(POLL_S, remaining))
        if status == "tookover":
            self.notice(f"{self.serial}: took over the stale lease of {old.describe()}: no "
                        f"heartbeat for more than {self.stale_s} s of device uptime, so that "
                        "session is gone or stuck")
        elif waiting_said:
            self.notice(f"{self.serial}: got the lease after waiting "
                        f"{time.monotonic() - started:.1f} s")
        self._hold()

    def _try(self, dead: str = "") -> tuple[str, Holder, Holder]:
        try:
            _, out = self.run(self._acquire_script(dead), 30.0)
        except Exception as exc:  # the transport's: AdbError, SshError (DeviceErrors)
            raise DeviceError(f"{self.serial}: cannot take the device lease: {exc}") from exc
        status = ""
        holder: dict[str, str] = {}
        old: dict[str, str] = {}
        for line in out.splitlines():
            head, _, rest = line.partition(" ")
            if head == "LEASE":
                status = rest.strip()
            elif head in ("LEASE_HOLDER", "LEASE_OLD"):
                key, _, value = rest.partition("=")
                (holder if head == "LEASE_HOLDER" else old)[key.strip()] = value.strip()
        if status not in ("taken", "ours", "tookover", "held"):
            raise DeviceError(f"{self.serial}: cannot take the device lease {self.dir}: the "
                              f"device answered {out.strip()[-300:]!r}")
        return status, Holder(holder), Holder(old)

    def _hold(self) -> None:
        if self.held:
            return
        self.held = True
        with _LOCK:
            held = _HELD.get(self.key)
            if held is None or held.stop.is_set() or held.lost:
                held = _HELD[self.key] = _Held(self.run, self._release_script())
            held.count += 1
            self._entry = held
            if held.thread is None:
                held.thread = threading.Thread(target=self._beat, args=(held,), daemon=True,
                                               name=f"hil-lease-{self.serial}")
                held.thread.start()

    def _beat(self, held: _Held) -> None:
        """The heartbeat thread: refresh until released; a lease another session took over is
        recorded as lost (and no longer touched). adb errors are left to the session's own
        calls, which re-acquire a dropped device."""
        while not held.stop.wait(self.heartbeat_s):
            try:
                _, out = held.run(self._heartbeat_script(), 15.0)
            except Exception:  # noqa: BLE001 -- the device is away: the session's calls deal with that
                continue
            if "LEASE lost" in out or "LEASE removed" in out:
                fields = dict(l.split(" ", 1)[1].split("=", 1) for l in out.splitlines()
                              if l.startswith("LEASE_HOLDER ") and "=" in l)
                held.lost = (f"{self.serial}: {self._how_lost(Holder(fields))}; the device is "
                             "not used any more in this session")
                return

    def _how_lost(self, now: Holder) -> str:
        """How this process lost its lease, from what the device holds now (`now`: its owner
        file, empty when the lease directory or its owner is gone): only an owner whose `took`
        names this process took it over; anything else is someone else's doing."""
        lease = f"this session's device lease {self.dir}"
        if not now.get("token"):
            return (f"{lease} was removed by someone else (not by this session: its directory "
                    "or owner file is gone from the device)")
        if now.get("took") == self.token:
            age = now.get("tookage")
            why = ("this process was found gone on its own host" if age == "gone" else
                   f"its heartbeat had not reached the device for {age} s" if age.isdigit()
                   else "its heartbeat was stale")
            return f"{lease} was taken over by {now.describe()} ({why})"
        return (f"{lease} was rewritten by someone else: it now names {now.describe()}, which "
                "did not take it over from this session (a hand edit, or the lease removed and "
                "the free device then taken)")

    @property
    def lost(self) -> str:
        """Why this session no longer holds the lease, or ""."""
        return self._entry.lost if self.held and self._entry is not None else ""

    def release(self, timeout: float = 15.0) -> None:
        """Give the lease back (the last session of this process to hold it removes it from the
        device, if it still names this process). Best effort: a device that is gone keeps the
        lease until it is stale."""
        if not self.held:
            return
        self.held = False
        held, self._entry = self._entry, None
        with _LOCK:
            if held is None:
                return
            held.count -= 1
            if held.count > 0:
                return
            held.stop.set()
            if _HELD.get(self.key) is held:
                del _HELD[self.key]
        if held.lost:
            return
        try:
            self.run(self._release_script(), timeout)
        except Exception:  # noqa: BLE001 -- best effort: a lease not released expires
            pass


@atexit.register
def _release_all() -> None:
    """Leases still held when the interpreter exits (a session that was never closed)."""
    with _LOCK:
        items = list(_HELD.items())
        _HELD.clear()
    for held in [h for _, h in items]:
        held.stop.set()
        if not held.lost and held.pid == os.getpid():  # never a parent's, from a forked child
            try:
                held.run(held.release_script, 5.0)
            except Exception:  # noqa: BLE001 -- best effort at exit: the lease expires anyway
                pass
