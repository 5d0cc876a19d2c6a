"""The device lease (harness/devices/lease.py) and the workers-per-device rule, against the
loopback device through the real adb server.

Two real pytest sessions (`python -m pytest tests/hil/test_isolation.py -k "s4 and fp16"
--device=<serial>`) share one loopback phone: while one holds it, a second without
--lease-wait fails at once naming the holder, and one with --lease-wait waits and then passes.
A crashed session's lease (written by hand, heartbeat an hour old) is taken over with a notice;
a closed session leaves no lease behind; a session whose lease another one took over stops using
the device.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.devices import lease as lease_module
from harness.devices.lease import LEASE_DIR, LeaseBusy, process_token
from harness.errors import DeviceError
from harness.loopback import LoopbackDevice, connect, disconnect, start_server
from harness.qnn.sdk import discover
from harness.config.options import Options
from harness.session import HilSession

from adb_options import adb_options

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("adb") is None,
                                reason="the adb client/server (Debian package adb) is not installed")
# Holds the lease at the end of its session until a file appears (the test says when).
HOLD_PLUGIN = '''
import os, time

def pytest_sessionfinish(session):
    flag = os.environ.get("HOLD_UNTIL")
    deadline = time.monotonic() + 900  # the test releases it; this bounds a test gone wrong
    while flag and not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.1)
'''


def options(tmp_path: Path, serial: str, **overrides) -> Options:
    return adb_options(tmp_path, serial, **{"session_id": "this-session", **overrides})


@pytest.fixture(scope="module")
def sdk():
    return discover()


@pytest.fixture
def phone(tmp_path, sdk):
    start_server()
    dev = LoopbackDevice(tmp_path / "phone", extra_env=sdk.device_environment()).start()
    connect(dev.serial)
    yield dev
    disconnect(dev.serial, missing_ok=True)
    dev.stop()


def lease_dir(phone) -> Path:
    return phone.sandbox / LEASE_DIR.lstrip("/")


def owner(phone) -> dict[str, str]:
    text = (lease_dir(phone) / "owner").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def uptime() -> int:
    """The loopback device's monotonic clock: its commands run on this host."""
    return int(float(Path("/proc/uptime").read_text().split()[0]))


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def write_lease(phone, age_s: int, heartbeat: str | None = None, **fields) -> None:
    """A lease as another session's process would have written it, its heartbeat `age_s` old
    in device uptime (`heartbeat`: the heartbeat file's text instead)."""
    now = int(time.time())
    assert uptime() > age_s + 5, "this host has not been up long enough for that age"
    d = lease_dir(phone)
    d.mkdir(parents=True)
    values = {"token": "other-host-4242-0123456789ab", "host": "other-host", "pid": "4242",
              "session": "crashed-session", "worker": "gw1", "since": str(now - age_s - 60)}
    values.update(fields)
    (d / "owner").write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    (d / "heartbeat").write_text(heartbeat if heartbeat is not None
                                 else f"{uptime() - age_s} {boot_id()}\n")


# In-process sessions ---------------------------------------------------------------------------

def test_the_lease_is_held_while_the_session_runs_and_released_at_the_end(phone, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 0.3)
    session = HilSession(options(tmp_path, phone.serial, worker="gw3"))
    device = session.device
    held = owner(phone)
    assert held["token"] == process_token() and held["pid"] == str(os.getpid())
    assert (held["session"], held["worker"]) == ("this-session", "gw3")
    assert held["host"] and held["since"].isdigit()
    first = (lease_dir(phone) / "heartbeat").read_text()
    deadline = time.monotonic() + 10
    while (lease_dir(phone) / "heartbeat").read_text() == first:  # device uptime, seconds
        assert time.monotonic() < deadline, "the heartbeat was not refreshed"
        time.sleep(0.2)
    session.close()
    assert not lease_dir(phone).exists(), "the lease outlived the session"
    assert not list(lease_dir(phone).parent.glob(".executorch-hil-lease*"))
    assert not device.device_lease.held


def test_a_held_lease_fails_a_second_session_at_once_naming_the_holder(phone, tmp_path):
    write_lease(phone, age_s=3)
    started = time.monotonic()
    with pytest.raises(LeaseBusy) as exc:
        _ = HilSession(options(tmp_path, phone.serial)).device
    assert time.monotonic() - started < 30  # at once: no waiting for the lease
    text = str(exc.value)
    assert f"device {phone.serial} is in use by another session" in text
    for part in ("host other-host", "pid 4242", "session crashed-session", "worker gw1",
                 "since 20", "UTC", "--lease-wait 0"):
        assert part in text, (part, text)
    # 3 s when written; the device's clock may pass a second boundary before it is read.
    assert re.search(r"last heartbeat [3-9] s ago", text), text
    assert owner(phone)["token"] == "other-host-4242-0123456789ab"  # not touched
    # Nothing of this session reached the device: no workspace, no push.
    assert not [p for p in (phone.sandbox / "data/local/tmp").iterdir()
                if p.name.startswith("executorch-hil-")]


def test_a_stale_lease_is_taken_over_with_a_notice(phone, tmp_path):
    write_lease(phone, age_s=150)
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    notes = [n for n in session.notices if "took over the stale lease" in n]
    assert notes, session.notices
    for part in (phone.serial, "host other-host", "pid 4242", "session crashed-session",
                 "more than 120 s"):
        assert part in notes[0], (part, notes[0])
    assert re.search(r"last heartbeat 1[5-9]\d s ago", notes[0]), notes[0]
    assert owner(phone)["token"] == process_token()
    device.close()
    assert not lease_dir(phone).exists()


def test_waiting_for_a_lease_that_is_not_released_gives_up_after_lease_wait(phone, tmp_path,
                                                                           monkeypatch):
    monkeypatch.setattr(lease_module, "POLL_S", 0.2)
    write_lease(phone, age_s=0)
    session = HilSession(options(tmp_path, phone.serial, lease_wait=1.5))
    started = time.monotonic()
    with pytest.raises(LeaseBusy, match=r"waited \d+ s \(--lease-wait 1.5\)"):
        _ = session.device
    assert 1.4 <= time.monotonic() - started < 60  # gave up (the device's setup comes first)
    assert any("waiting up to 1.5 s for the lease held by host other-host" in n
               for n in session.notices), session.notices


def lost_after(device, change) -> str:
    """`change()` the device's lease behind the session's back; why the session lost it."""
    change()
    deadline = time.monotonic() + 10
    while not device.device_lease.lost:
        assert time.monotonic() < deadline, "the heartbeat did not notice"
        time.sleep(0.1)
    with pytest.raises(DeviceError) as exc:
        device.command(["true"])
    return str(exc.value)


def test_a_session_whose_lease_was_taken_over_stops_using_the_device(phone, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 0.2)
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    # Another session took it over (as it would after this one's heartbeats stopped): its
    # owner file names the token it took over and the heartbeat's age it saw.
    text = lost_after(device, lambda: (lease_dir(phone) / "owner").write_text(
        "token=new-host-7-abc\nhost=new-host\npid=7\nsession=newer\nworker=master\nsince=1\n"
        f"took={process_token()}\ntookage=131\n"))
    assert "lease /data/local/tmp/.executorch-hil-lease was taken over by host new-host pid 7" \
        in text, text
    assert "its heartbeat had not reached the device for 131 s" in text, text
    session.close()
    assert owner(phone)["host"] == "new-host"  # the new holder's lease is left alone


def test_a_lease_rewritten_by_hand_is_said_as_that(phone, tmp_path, monkeypatch):
    """An owner file edited by hand took nothing over from this session: the session says its
    lease was rewritten, not that its heartbeat had not reached the device for 120 s."""
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 0.2)
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    text = lost_after(device, lambda: (lease_dir(phone) / "owner").write_text(
        "token=new-host-7-abc\nhost=new-host\npid=7\nsession=newer\nworker=master\nsince=1\n"))
    assert "was rewritten by someone else: it now names host new-host pid 7" in text, text
    assert "did not take it over from this session" in text and "120 s" not in text, text
    session.close()
    assert owner(phone)["host"] == "new-host"


def test_a_lease_removed_by_hand_is_said_as_that(phone, tmp_path, monkeypatch):
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 0.2)
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    text = lost_after(device, lambda: shutil.rmtree(lease_dir(phone)))
    assert "device lease /data/local/tmp/.executorch-hil-lease was removed by someone else" \
        in text, text
    assert "taken over" not in text and "120 s" not in text, text
    session.close()


def test_a_real_takeover_names_the_heartbeat_age_it_saw(phone, monkeypatch):
    """A session whose heartbeats stopped reaching the device is taken over by another, which
    says so in the owner file; the first one's lease is then lost as a takeover."""
    monkeypatch.setattr(lease_module, "HEARTBEAT_S", 3.5)
    first = other_process(phone, "slow-holder")
    assert of_another_host(first, monkeypatch) == "taken"
    first._hold()
    try:
        time.sleep(2.2)
        taker = other_process(phone, "taker", stale_s=1)
        taker.acquire(0)
        assert owner(phone)["took"] == "slow-holder" and owner(phone)["tookage"].isdigit()
        deadline = time.monotonic() + 10
        while not first.lost:
            assert time.monotonic() < deadline, "the heartbeat did not notice"
            time.sleep(0.1)
        assert re.search(r"was taken over by host \S+ pid \d+ session taker.*its heartbeat had "
                         r"not reached the device for [2-9] s", first.lost), first.lost
        taker.release()
    finally:
        first.release()


@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale"])
def test_of_sessions_racing_for_a_lease_exactly_one_gets_it(stale, phone):
    """Eight holders (tokens of eight processes) ask at the same moment, for a free device or
    for one whose lease is stale: one takes it (mkdir, or the takeover under its own mkdir
    lock), the seven others are told who holds it."""
    from harness.devices.adb.transport import adb_client, shell_v2

    if stale:
        write_lease(phone, age_s=150)
    client = adb_client()

    def run(command: str, timeout: float) -> tuple[int, str]:
        code, out, err = shell_v2(client, phone.serial, command, timeout=timeout)
        return code, (out + err).decode()

    leases = [lease_module.DeviceLease("race", phone.serial, run, session=f"s{i}", worker="w",
                                       token=f"racer-{i}") for i in range(8)]
    barrier = threading.Barrier(len(leases))
    outcomes: dict[int, tuple] = {}

    def attempt(i: int) -> None:
        barrier.wait()
        outcomes[i] = leases[i]._try()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(leases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    statuses = sorted(status for status, _, _ in outcomes.values())
    won = "tookover" if stale else "taken"
    assert statuses == sorted([won] + ["held"] * 7), statuses
    winner = next(i for i, (status, _, _) in outcomes.items() if status == won)
    assert owner(phone)["token"] == f"racer-{winner}"
    for status, holder, _ in outcomes.values():
        if status == "held":  # named the winner, or a holder still writing its lease file
            assert holder.get("token") in (f"racer-{winner}", "", "other-host-4242-0123456789ab")
    assert not list(lease_dir(phone).parent.glob(".executorch-hil-lease.*"))


# Clocks and dead holders ---------------------------------------------------------------------------

def shell_of(phone):
    """A lease's `run` on the loopback phone through the real adb server."""
    from harness.devices.adb.transport import adb_client, shell_v2

    client = adb_client()

    def run(command: str, timeout: float) -> tuple[int, str]:
        code, out, err = shell_v2(client, phone.serial, command, timeout=timeout)
        return code, (out + err).decode()
    return run


def other_process(phone, token: str, **kwargs) -> lease_module.DeviceLease:
    return lease_module.DeviceLease("clock", phone.serial, shell_of(phone), session=token,
                                    worker="w", token=token, **kwargs)


def of_another_host(lease: lease_module.DeviceLease, monkeypatch) -> str:
    """`lease._try()` as a process of another host would (its owner file names another boot of
    this host): a holder of this host is judged by its pid, and these holders' pid (this
    process) runs."""
    with monkeypatch.context() as m:
        m.setattr(lease_module, "host_boot_id", lambda: "another-boot")
        return lease._try()[0]


def racers(phone, n: int, tag: str) -> list[lease_module.DeviceLease]:
    run = shell_of(phone)
    return [lease_module.DeviceLease("race", phone.serial, run, session=f"s{i}", worker="w",
                                     token=f"{tag}-{i}") for i in range(n)]


def race(leases: list[lease_module.DeviceLease]) -> list[str]:
    """All of `leases` ask at the same moment; their statuses."""
    barrier = threading.Barrier(len(leases))
    outcomes: dict[int, str] = {}

    def attempt(i: int) -> None:
        barrier.wait()
        outcomes[i] = leases[i]._try()[0]

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(len(leases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sorted(outcomes.values())


def test_a_lease_directory_without_its_heartbeat_is_being_written_not_stale(phone):
    """A racer that arrives between another's making the lease directory and its first
    heartbeat finds no heartbeat: that lease is a moment old and held (its age was read as the
    device's uptime, so the racer took it over and two sessions held one device)."""
    d = lease_dir(phone)
    d.mkdir(parents=True)  # made, nothing written yet
    status, holder, _ = other_process(phone, "late-racer")._try()
    assert status == "held"
    assert "still being written" in holder.describe()
    assert not (d / "owner").exists()
    # ... but one whose writer died in that moment goes stale by its directory's own age
    old = time.time() - 200
    os.utime(d, (old, old))
    notes: list[str] = []
    taker = other_process(phone, "taker", notice=notes.append)
    taker.acquire(0)
    assert owner(phone)["token"] == "taker" and any("took over" in n for n in notes), notes
    taker.release()


def test_a_heartbeat_newer_than_a_racers_uptime_reading_is_fresh(phone):
    """Under load a racer reads the device's uptime, stalls, and then reads the winner's
    heartbeat, written a second later: newer than the racer's reading, it was taken for a
    heartbeat of an earlier boot (as old as the uptime) and the racer took the lease over."""
    write_lease(phone, age_s=0, heartbeat=f"{uptime() + 2} {boot_id()}\n")
    status, holder, _ = other_process(phone, "stalled-racer")._try()
    assert status == "held", holder.fields
    assert holder.age == 0 and not holder.since_boot

def test_racing_for_a_lease_beside_cpu_hogs_never_gives_it_twice(phone):
    """The race of eight sessions, many rounds, free and stale, while CPU hogs stretch every
    window between a racer's steps: exactly one racer holds the lease after each round."""
    hogs = [subprocess.Popen(["sh", "-c", "exec yes >/dev/null"]) for _ in range(3)]
    try:
        for round_ in range(40):
            stale = bool(round_ % 2)
            if stale:
                write_lease(phone, age_s=150)
            won = "tookover" if stale else "taken"
            statuses = race(racers(phone, 8, f"r{round_}"))
            assert statuses == sorted([won] + ["held"] * 7), (round_, statuses)
            assert owner(phone)["token"].startswith(f"r{round_}-")
            assert not list(lease_dir(phone).parent.glob(".executorch-hil-lease.*"))
            assert [p.name for p in lease_dir(phone).iterdir()] in (
                ["heartbeat", "owner"], ["owner", "heartbeat"]), list(lease_dir(phone).iterdir())
            shutil.rmtree(lease_dir(phone))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_forward_jump_of_the_device_clock_does_not_make_a_live_lease_stale(phone):
    """NTP or NITZ sets a phone's clock an hour ahead while a session holds it: a second
    session must still find the lease held (a wall-clock age read an hour and took it over)."""
    holder = other_process(phone, "live-holder")
    assert holder._try()[0] == "taken"
    phone.set_clock_offset(3600)
    try:
        with pytest.raises(LeaseBusy, match=r"live-holder.*last heartbeat \d s ago"):
            other_process(phone, "second-session").acquire(0)
        assert owner(phone)["token"] == "live-holder"
    finally:
        phone.set_clock_offset(0)


def test_a_backward_jump_of_the_device_clock_does_not_keep_a_dead_lease_fresh(phone, monkeypatch):
    """The clock goes an hour back after the holder died: its lease goes stale after the stale
    time of device uptime all the same (a wall-clock age read -3598 s and blocked the phone)."""
    assert of_another_host(other_process(phone, "dead-holder"), monkeypatch) == "taken"
    phone.set_clock_offset(-3600)
    try:
        time.sleep(3.2)
        notes: list[str] = []
        taker = other_process(phone, "taker", stale_s=2, notice=notes.append)
        taker.acquire(0)
        assert owner(phone)["token"] == "taker"
        assert any("took over the stale lease" in n and "dead-holder" in n for n in notes), notes
        taker.release()
    finally:
        phone.set_clock_offset(0)


def test_a_heartbeat_of_an_earlier_boot_is_as_old_as_the_devices_uptime(phone, tmp_path):
    """A lease left from before the phone rebooted (another boot id, or the old wall-clock
    format): its holder has not beaten since the boot, so it is stale once the device has been
    up for the stale time."""
    write_lease(phone, age_s=0, heartbeat=f"{uptime()} 00000000-0000-0000-0000-000000000000\n")
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    notes = [n for n in session.notices if "took over the stale lease" in n]
    assert notes and "no heartbeat since the device booted" in notes[0], session.notices
    device.close()


def test_a_lease_of_a_dead_process_of_this_host_is_taken_over_at_once(phone, tmp_path):
    """SIGKILL (or the OOM killer) leaves the lease behind; the next session on the same host
    sees its pid is gone and takes the phone at once, with a notice (it waited 120 s)."""
    script = (
        "import os, sys\n"
        "from harness.devices import lease\n"
        "from harness.devices.adb.transport import adb_client, shell_v2\n"
        "c = adb_client()\n"
        "run = lambda cmd, t: (lambda r: (r[0], (r[1] + r[2]).decode()))("
        "shell_v2(c, sys.argv[1], cmd, timeout=t))\n"
        "l = lease.DeviceLease('k', sys.argv[1], run, session='killed', worker='gw0')\n"
        "assert l._try()[0] == 'taken'\n"
        "os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", script, phone.serial], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert owner(phone)["session"] == "killed" and owner(phone)["host"]
    started = time.monotonic()
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    assert time.monotonic() - started < 60
    notes = [n for n in session.notices if "no longer runs" in n]
    assert notes and "session killed" in notes[0], session.notices
    assert owner(phone)["token"] == process_token()
    device.close()


def here(**fields) -> dict[str, str]:
    """Owner fields of a holder on this host (this process unless `fields` say otherwise)."""
    return {"host": lease_module._clean(socket.gethostname()),
            "hostboot": lease_module._clean(lease_module.host_boot_id()),
            "pid": str(os.getpid()), "pidstart": lease_module.pid_start(os.getpid()), **fields}


def test_a_lease_of_a_live_process_of_this_host_is_not_taken(phone, tmp_path):
    write_lease(phone, age_s=3, **here())
    with pytest.raises(LeaseBusy):
        _ = HilSession(options(tmp_path, phone.serial)).device


@pytest.mark.parametrize("heartbeat", ["garbage\n", "", "old"], ids=["garbage", "empty", "stale"])
def test_a_live_holder_of_this_host_is_kept_whatever_its_heartbeat_says(phone, tmp_path,
                                                                      heartbeat):
    """A heartbeat edited by hand (garbage, emptied) reads as old as the device's uptime, and a
    stale one is old: a holder on this host whose process runs keeps its lease all the same
    (the pid is checked before any takeover of a holder of this host)."""
    if heartbeat == "old":
        write_lease(phone, age_s=150, **here())
    else:
        write_lease(phone, age_s=0, heartbeat=heartbeat, **here())
    with pytest.raises(LeaseBusy, match="That process runs on this host"):
        _ = HilSession(options(tmp_path, phone.serial)).device
    assert owner(phone)["pid"] == str(os.getpid()) and "took" not in owner(phone)


def test_a_garbage_heartbeat_of_a_dead_process_of_this_host_is_taken_at_once(phone, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    write_lease(phone, age_s=0, heartbeat="garbage\n", **here(pid=str(gone.pid), pidstart=""))
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    assert any("no longer runs" in n for n in session.notices), session.notices
    assert owner(phone)["took"] == "other-host-4242-0123456789ab"
    assert owner(phone)["tookage"] == "gone"
    device.close()


def test_a_reused_pid_is_not_the_holder(phone, tmp_path):
    """The holder's pid runs, but as a process that started at another time (the pid was
    reused after the holder died): the holder is gone, and its lease is taken at once."""
    write_lease(phone, age_s=3, **here(pidstart="1"))
    session = HilSession(options(tmp_path, phone.serial))
    device = session.device
    assert any("no longer runs" in n for n in session.notices), session.notices
    device.close()


# Two real pytest sessions on one device ----------------------------------------------------------

def _pytest(serial: str, tmp_path: Path, name: str, *extra: str, hold: Path | None = None):
    env = {**os.environ, "EXECUTORCH_HIL_SESSION_ID": f"lease-test-{name}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), str(REPO),
                                                        os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-k", "s4 and fp16",
            f"--device={serial}", f"--artifacts-dir={tmp_path / 'artifacts'}", "-p",
            "no:cacheprovider", "-q", *extra]
    if hold is not None:
        env["HOLD_UNTIL"] = str(hold)
        argv += ["-p", "hold_lease"]
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


class _Commands(logging.Handler):
    """The loopback's shell commands (it logs each at debug level), with their arrival time."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((time.monotonic(), record.getMessage()))

    def lease_attempts(self, since: float, not_token: str) -> int:
        return sum(1 for t, m in self.seen if t >= since and "echo LEASE held" in m
                   and not_token not in m)


def test_two_sessions_on_one_device_one_waits_and_both_pass(phone, tmp_path):
    (tmp_path / "hold_lease.py").write_text(HOLD_PLUGIN)
    release = tmp_path / "release-the-lease"
    commands = _Commands()
    shell_log = logging.getLogger("harness.loopback.shell")
    level = shell_log.level
    shell_log.setLevel(logging.DEBUG)
    shell_log.addHandler(commands)
    procs = []
    try:
        holder = _pytest(phone.serial, tmp_path, "A", hold=release)
        procs.append(holder)
        deadline = time.monotonic() + 180
        # The owner file, not the heartbeat: a taker writes its heartbeat first (see lease.py).
        while not (lease_dir(phone) / "owner").exists():
            assert holder.poll() is None, holder.communicate()[0]
            assert time.monotonic() < deadline, "the first session never took the lease"
            time.sleep(0.1)
        token = owner(phone)["token"]
        at_once = _pytest(phone.serial, tmp_path, "B")
        waiter = _pytest(phone.serial, tmp_path, "C", "--lease-wait=300")
        procs += [at_once, waiter]
        out_b, _ = at_once.communicate(timeout=300)
        assert at_once.returncode != 0, out_b
        # The waiter is polling for the lease now (the one without --lease-wait has ended).
        after_b = time.monotonic()
        deadline = after_b + 180
        while commands.lease_attempts(after_b, token) < 2:
            assert waiter.poll() is None, waiter.communicate()[0]
            assert time.monotonic() < deadline, "the second session never asked for the lease"
            time.sleep(0.1)
        assert holder.poll() is None, "the holder did not hold the lease until told"
        release.touch()
        out_a, _ = holder.communicate(timeout=300)
        out_c, _ = waiter.communicate(timeout=300)
    finally:
        shell_log.removeHandler(commands)
        shell_log.setLevel(level)
        release.touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert holder.returncode == 0, out_a
    assert waiter.returncode == 0, out_c
    assert "1 passed" in out_a and "1 passed" in out_c, (out_a, out_c)
    # Without --lease-wait: failed at once, naming the holder.
    assert "HIL device unavailable" in out_b and "is in use by another session" in out_b, out_b
    for part in (f"pid {holder.pid}", "session lease-test-A", "worker master", "--lease-wait 0"):
        assert part in out_b, (part, out_b)
    # With it: waited for that holder, then got the device.
    assert "waiting up to 300 s for the lease held by host" in out_c, out_c
    assert f"pid {holder.pid} session lease-test-A" in out_c, out_c
    assert "got the lease after waiting" in out_c, out_c
    assert not lease_dir(phone).exists(), "a lease outlived both sessions"


# More workers than devices ----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["controller", "worker"])
def test_more_xdist_workers_than_devices_is_a_usage_error(how, tmp_path):
    """`-n 3` with two devices fails at start-up (the controller sees -n; a worker sees
    PYTEST_XDIST_WORKER_COUNT), before any device is touched (these serials do not exist)."""
    env = dict(os.environ)
    argv = [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-p",
            "no:cacheprovider", "--device=127.0.0.1:1", "--device=127.0.0.1:2",
            f"--artifacts-dir={tmp_path}"]
    if how == "controller":
        argv[4:4] = ["-n", "3"]
    else:
        env.update(PYTEST_XDIST_WORKER="gw2", PYTEST_XDIST_WORKER_COUNT="3")
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert ("3 pytest-xdist workers for 2 device(s) (127.0.0.1:1, 127.0.0.1:2): more workers "
            "than devices is not supported") in proc.stderr, proc.stderr
    assert "-n 2 or fewer" in proc.stderr
