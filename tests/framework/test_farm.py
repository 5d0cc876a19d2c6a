"""Device farms on labgrid (harness/devices/farm.py) against a real labgrid 26.0.1 coordinator and
exporter on 127.0.0.1, with loopback phones (x86_64, running on the host's HTP simulator) as
places tagged soc=SM8650:

- a nightly run, `pytest -n 2 --lg-coordinator ... --lg-place-tags soc=SM8650`, on three
  places: one phone is killed while its worker's first test runs; that test fails, the worker's
  later test runs on the spare place, the dead place ends released and tagged hil_unhealthy,
  and no reservation is left;
- a session whose first phone fails preflight goes on with the next place; a place left
  acquired by a dead process is reclaimed; with every place unhealthy, the error is immediate.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.cache import cache_root
from harness.devices.farm import UNHEALTHY_TAG, load_exporter_config, parse_tags
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "device_configs" / "farms" / "labgrid-example.yaml"
pytestmark = pytest.mark.skipif(
    shutil.which("adb") is None or shutil.which("labgrid-coordinator") is None,
    reason="needs the adb server (Debian package adb) and labgrid (pip install labgrid==26.0.1)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout} s: {log.read_text()[-2000:]}")


class Processes:
    """Every process the test starts, stopped (and waited for) at the end whatever happens."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """stdout to a log file unless given; stderr always to the log file."""
        log = self.logs / f"{name}.log"
        with log.open("w") as out:
            kwargs.setdefault("stdout", out)
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=out,
                                    start_new_session=True, **kwargs)
        proc.log = log
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


@contextlib.contextmanager
def coordinator_client(address: str):
    """A labgrid client session of this process (the test's own view of the coordinator)."""
    import asyncio

    from labgrid.remote.client import start_session

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # the gRPC channel binds to the current loop when made
    try:
        session = start_session(address, loop=loop)
        try:
            yield session
        finally:
            loop.run_until_complete(session.stop())
            loop.run_until_complete(session.close())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def call(session, method: str, **fields):
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    request = getattr(pb2, method + "Request")(**fields)
    response = session.loop.run_until_complete(getattr(session.stub, method)(request))
    session.loop.run_until_complete(session.sync_with_coordinator())
    return response


def kill_left_runners(sandbox: Path) -> None:
    """A runner leads its own process group, so a killed loopback leaves it running: kill it."""
    for pid_file in sandbox.glob("data/local/tmp/*/runs/*/runner.pid"):
        pid = pid_file.read_text().strip()
        if pid.isdigit():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)


def first_run(sandboxes: dict[str, Path]) -> str | None:
    """The serial of the first phone on which a scenario run has started."""
    for serial, sandbox in sandboxes.items():
        if any(d.name != ".command" for d in sandbox.glob("data/local/tmp/executorch-hil-*/runs/*")):
            return serial
    return None


def test_example_is_an_exporter_config(tmp_path):
    """device_configs/farms/labgrid-example.yaml loads as labgrid-exporter reads it (and
    validate-configs checks it so); one with a `#` comment (a Jinja2 statement there) does not."""
    data = load_exporter_config(EXAMPLE)
    assert data and all(set(group) == {"NetworkService"} for group in data.values()), data
    bad = tmp_path / "labgrid-bad.yaml"
    bad.write_text("# a YAML comment is a Jinja2 statement in an exporter config\nphone: {}\n")
    with pytest.raises(ConfigError, match="not a labgrid exporter config"):
        load_exporter_config(bad)


def test_place_tags_are_checked():
    assert parse_tags(["soc=SM8650", "board=qrd"]) == {"soc": "SM8650", "board": "qrd"}
    for bad in ("soc", "SOC=x", "soc=", "a=b=c"):
        with pytest.raises(ConfigError, match="--lg-place-tags"):
            parse_tags([bad])


def reserve(lg, **tags) -> str:
    """A reservation of the test's own (labgrid-client reserve name=PLACE), polled until
    allocated."""
    from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

    token = call(lg, "CreateReservation", filters={"main": pb2.Reservation.Filter(filter=tags)},
                 prio=0.0).reservation.token
    deadline = time.monotonic() + 30
    while call(lg, "PollReservation", token=token).reservation.state == 0:  # waiting
        assert time.monotonic() < deadline, tags
        time.sleep(0.1)
    return token


def lab(tmp_path: Path, procs: Processes, serials: list[str]) -> str:
    """A coordinator and an exporter on 127.0.0.1, and places sm8650-<i> for the phones
    `serials` (labgrid-client -p P create / set-tags / add-match); returns its address."""
    address = f"127.0.0.1:{free_port()}"
    (tmp_path / "coordinator").mkdir()  # it writes places.yaml in its working directory
    coordinator = procs.start("coordinator", ["labgrid-coordinator", "-l", address],
                              cwd=tmp_path / "coordinator")
    exporter_yaml = tmp_path / "exporter.yaml"
    exporter_yaml.write_text("".join(
        f"phone{i}:\n  NetworkService:\n    address: 127.0.0.1\n"
        f"    port: {s.rpartition(':')[2]}\n    username: shell\n"
        for i, s in enumerate(serials)))
    wait_port(int(address.rpartition(":")[2]), coordinator, coordinator.log)
    procs.start("exporter", ["labgrid-exporter", "-c", address, "-n", "hilfarm",
                             str(exporter_yaml)])
    with coordinator_client(address) as lg:
        deadline = time.monotonic() + 30
        while len(lg.resources.get("hilfarm", {})) < len(serials):  # exported
            assert time.monotonic() < deadline, lg.resources
            lg.loop.run_until_complete(lg.sync_with_coordinator())
            time.sleep(0.1)
        for i, serial in enumerate(serials):
            place = f"sm8650-{i}"
            call(lg, "AddPlace", name=place)
            call(lg, "SetPlaceTags", placename=place,
                 tags={"soc": "SM8650", "serial": serial, "adb": "127.0.0.1:5037"})
            call(lg, "AddPlaceMatch", placename=place, pattern=f"hilfarm/phone{i}/NetworkService")
    return address


def final_state(address: str) -> tuple[dict, list]:
    """(places by name, reservations) as the coordinator has them now."""
    with coordinator_client(address) as lg:
        places = {p.name: p for p in call(lg, "GetPlaces").places}
        return places, list(call(lg, "GetReservations").reservations)


def test_farm_run_fails_over_to_a_spare_place(tmp_path):
    """Places sm8650-0 and -1 go to the two workers (the test holds -2 with a reservation of
    its own); once a phone is killed and the other worker has its place, the test holds that
    place instead (a worker that runs out of tests releases its place at once, and the
    failed-over worker could take that one), so the failover lands on sm8650-2."""
    started = time.monotonic()
    logs = tmp_path / "logs"
    logs.mkdir()
    procs = Processes(logs)
    sandboxes: dict[str, Path] = {}
    loopbacks: dict[str, subprocess.Popen] = {}
    killed: list[str] = []
    done = threading.Event()
    try:
        for i in range(3):
            sandbox = tmp_path / f"phone{i}"
            proc = procs.start(f"phone{i}", [sys.executable, "-m", "harness.loopback",
                                             "--sandbox", str(sandbox)],
                               stdout=subprocess.PIPE, text=True, cwd=ROOT)
            line = proc.stdout.readline()
            assert line.startswith("serial: "), (line, proc.log.read_text())
            serial = line.split()[1]
            sandboxes[serial], loopbacks[serial] = sandbox, proc
        serials = list(sandboxes)
        address = lab(tmp_path, procs, serials)
        with coordinator_client(address) as lg:
            spare_hold = reserve(lg, name="sm8650-2")
        set_up = time.monotonic() - started

        def kill_first_running_phone():
            """Kill the first phone a scenario starts on; once the other worker has its place,
            hold that place and free the spare."""
            serial, polled = None, time.monotonic()
            with coordinator_client(address) as lg:
                while serial is None and not done.is_set():
                    serial = first_run(sandboxes)
                    if time.monotonic() - polled > 5:  # keep the spare's reservation alive
                        call(lg, "PollReservation", token=spare_hold)
                        polled = time.monotonic()
                    time.sleep(0.02)
            if serial is None:
                return
            os.killpg(loopbacks[serial].pid, signal.SIGKILL)  # unplugged: no goodbye
            killed.append(serial)
            other = serials[1 - serials.index(serial)]
            survivor = f"sm8650-{serials.index(other)}"
            with coordinator_client(address) as lg:
                from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

                while not done.is_set():  # the other worker acquired its place (or used it)
                    places = {p.name: p for p in call(lg, "GetPlaces").places}
                    if places[survivor].acquired or first_run({other: sandboxes[other]}):
                        break
                    time.sleep(0.05)
                guard = call(lg, "CreateReservation", prio=0.0, filters={
                    "main": pb2.Reservation.Filter(filter={"name": survivor})}).reservation.token
                call(lg, "CancelReservation", token=spare_hold)
                while not done.wait(5):
                    call(lg, "PollReservation", token=guard)  # refresh its 60 s timeout
                call(lg, "CancelReservation", token=guard)
        watcher = threading.Thread(target=kill_first_running_phone, daemon=True)
        watcher.start()

        artifacts = tmp_path / "artifacts"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LG_"))}
        env.update(EXECUTORCH_HIL_REACQUIRE_S="1", EXECUTORCH_HIL_CACHE=str(cache_root()))
        run_start = time.monotonic()
        run = procs.start("pytest", [
            # A new runner process per scenario: a test lasts long enough on the phone for the
            # watcher to kill it during its first test (as forks, a worker's first test could
            # end before the kill, which then hit its last test and left nothing to fail over).
            sys.executable, "-m", "pytest", "-n", "2", "--scenario-isolation", "process",
            "-p", "no:cacheprovider",
            "--lg-coordinator", address, "--lg-place-tags", "soc=SM8650",
            "tests/hil/test_isolation.py", "-k", "s4 or s2", f"--artifacts-dir={artifacts}",
            "-rA", "--durations=0"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        out, _ = run.communicate(timeout=600)
        run_s = time.monotonic() - run_start
        (logs / "pytest.out").write_text(out)
        done.set()
        watcher.join(30)
        assert killed and not watcher.is_alive(), out

        dead, spare = killed[0], serials[2]
        survivor = serials[1 - serials.index(dead)]
        labels = {s: f"sm8650-{i} ({s})" for i, s in enumerate(serials)}
        tested = {s: re.findall(r"test_isolation\.py::\S+ (\w+)",
                                "\n".join(l for l in out.splitlines()
                                          if l.startswith(f"farm: tests on {labels[s]}:")))
                  for s in serials}
        # The run completed: the test running on the dead phone failed, the others passed;
        # its worker's later test ran on the spare place.
        assert re.search(r"=+ 1 failed, 3 passed in [\d.]+s", out), out
        assert tested == {dead: ["failed"], survivor: ["passed", "passed"], spare: ["passed"]}, out
        moved = re.search(rf"farm: (gw\d): {re.escape(labels[dead])} dropped off for good; the "
                          rf"remaining tests run on {re.escape(labels[spare])}", out)
        assert moved, out
        assert f"farm: {moved[1]}: marked sm8650-{serials.index(dead)} {UNHEALTHY_TAG}=offline" in out
        worker_file = next(artifacts.glob(f"*/session-{moved[1]}.txt")).read_text()
        assert f"tests on {labels[dead]}:" in worker_file, worker_file
        assert f"tests on {labels[spare]}:" in worker_file, worker_file
        assert f"released {labels[spare]}" in worker_file, worker_file  # at its end

        places, reservations = final_state(address)
        assert dict(places[f"sm8650-{serials.index(dead)}"].tags)[UNHEALTHY_TAG] == "offline"
        assert [UNHEALTHY_TAG in p.tags for p in places.values()].count(True) == 1, places
        assert not any(p.acquired for p in places.values()), places  # all released
        assert not any("hil_owner" in p.tags for p in places.values()), places
        assert len(reservations) == 0, reservations  # every reservation cancelled
        print(f"set-up {set_up:.1f} s; pytest -n 2 run {run_s:.1f} s; total "
              f"{time.monotonic() - started:.1f} s")
    finally:
        done.set()
        procs.stop_all()
        for serial, sandbox in sandboxes.items():
            subprocess.run(["adb", "disconnect", serial], capture_output=True, timeout=30)
            kill_left_runners(sandbox)


def test_preflight_failure_reclaim_and_no_place_left(tmp_path, monkeypatch, hil_session):
    """In one session (no xdist): the first place's phone fails preflight, so it is retired
    and the next place is used; a place left acquired by a dead process of this host is
    released before reserving; with every place unhealthy, lease() fails at once."""
    from harness.devices.adb.device import AdbDevice
    from harness.errors import DeviceError
    from harness.loopback import LoopbackDevice, connect
    from harness.qnn.sdk import discover
    from harness.config.options import Options
    from harness.session import HilSession

    procs = Processes(tmp_path)
    env = discover().device_environment()
    phones = [LoopbackDevice(tmp_path / f"phone{i}", extra_env=env).start() for i in range(2)]
    try:
        for phone in phones:
            connect(phone.serial)
        address = lab(tmp_path, procs, [p.serial for p in phones])
        failed: list[str] = []
        real = AdbDevice.preflight

        def first_fails(self):  # the first phone opened fails its preflight
            if not failed or failed == [self.serial]:
                failed.append(self.serial)
                return ["no fastrpc device node (test)"]
            return real(self)
        monkeypatch.setattr(AdbDevice, "preflight", first_fails)
        session = HilSession(Options(
            devices=[], simulator=False, soc=None, device_config=None,
            artifacts_dir=tmp_path / "artifacts", keep_artifacts=False,
            runner=hil_session.options.runner, runner_timeout=None, abi_bridge="auto",
            keep_workspace=False, device_workspace=None,
            worker="master", worker_count=1, lg_coordinator=address,
            lg_place_tags={"soc": "SM8650"}))
        try:
            device = session.device
            farm = session._farm.farm
            bad = next(i for i, p in enumerate(phones) if p.serial == failed[0])
            good = 1 - bad
            assert device.info.serial == phones[good].serial
            assert device.info.details["place"] == f"sm8650-{good}"
            assert f"marked sm8650-{bad} hil_unhealthy=preflight: no fastrpc device node (test)" \
                in farm.events
            # A worker killed while holding its place: acquired, hil_owner a dead pid here.
            lease = farm.leases.pop()
            dead = subprocess.Popen(["true"])
            dead.wait()
            farm._set_tags(lease.place, {"hil_owner": f"{socket.gethostname()}:{dead.pid}"})
            again = farm.lease()
            assert again.place == lease.place, farm.events
            assert any(e.startswith(f"released {lease.place}: left acquired by dead process")
                       for e in farm.events), farm.events
            farm.retire(again, "test", "every place unhealthy now")
            started = time.monotonic()
            with pytest.raises(DeviceError, match="every place with the tags soc=SM8650 is "
                                                  "unhealthy"):
                farm.lease()
            assert time.monotonic() - started < 5
        finally:
            session.close()
        places, reservations = final_state(address)
        assert {n: p.tags.get(UNHEALTHY_TAG) for n, p in places.items()} == \
            {f"sm8650-{bad}": "preflight", f"sm8650-{good}": "test"}
        assert not any(p.acquired for p in places.values()) and not reservations
    finally:
        procs.stop_all()
        for phone in phones:
            subprocess.run(["adb", "disconnect", phone.serial], capture_output=True, timeout=30)
            phone.stop()
