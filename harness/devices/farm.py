"""Getting a phone from a labgrid coordinator (`--lg-coordinator`, `--lg-place-tags`).

Each pytest process (every xdist worker, or a run without xdist) reserves one labgrid place by
tags, waits for the reservation, acquires the place and reads the phone from the place's tags:
`serial=` (the adb serial, required), `adb=host:port` (the adb server that sees it; default the
session's) and `soc=` (used as a farm override, like a farm file's `soc:`). labgrid 26.0.1 has no
adb resource, so the place's matches name a generic resource (a `NetworkService`) on the host's
exporter; that resource being exported is checked before acquiring, like `labgrid-client
acquire` does.

It uses labgrid's own client session (`labgrid.remote.client.ClientSession`, gRPC) on an event
loop in a background thread: the session's stream of place and resource updates keeps running
between tests (its keepalive pings need a running loop), and every call is one coroutine handed
to that loop.

Unhealthy places: `retire()` sets the tag `hil_unhealthy=<reason>` on the place (visible in
`labgrid-client places`, shared with every other worker and later sessions; an operator clears
it with `labgrid-client -p P set-tags hil_unhealthy=`), releases it and cancels its
reservation. labgrid's reservation filters can only require tags, not exclude one, so a
reservation that the scheduler allocates to a place tagged unhealthy (or retired by this
process) is kept open while another one is made, which the scheduler must then allocate to a
different place; the kept ones are cancelled once a good place is acquired. When no place
matching the tags is left without the tag, `lease()` fails at once instead of waiting.

Ending: `close()` (pytest_unconfigure, and atexit for a crash that still runs Python) releases
the place and cancels every reservation this process made. Without it: a waiting or allocated
reservation that nobody polls expires on the coordinator 60 s after its last poll (labgrid's
`Reservation.timeout`, refreshed by each `PollReservation`; the scheduler checks every 15 s),
which frees its place. An *acquired* place stays acquired in labgrid whatever happens to the
client (acquired reservations do not expire); so the harness tags its places `hil_owner=
<host>:<pid>` while it holds them, and `lease()` first releases places that a dead process on
this host left acquired (and cancels its reservation). One left by a host that died stays
acquired until `labgrid-client -p P release -k`.

One client session per process: a second one to the same coordinator, at the same time, is
refused: the coordinator tells clients apart by their peer address, and gRPC shares one
connection between channels to the same address (`grpc.use_local_subchannel_pool` would
avoid it, at the cost of replacing labgrid's channel).
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError, DeviceError

if TYPE_CHECKING:
    import asyncio

# asyncio (with ssl, about 60 ms) is imported where the client loop starts: every session reads
# the labgrid options through parse_tags and coordinator_address, few use a coordinator.

_log = logging.getLogger(__name__)

UNHEALTHY_TAG = "hil_unhealthy"
OWNER_TAG = "hil_owner"
WAIT_S = 600.0  # how long a reservation may wait for a place to become free
POLL_S = 0.5
CALL_S = 30.0  # one coordinator call
_TAG_KEY = re.compile(r"[a-z][a-z0-9_]+$")  # labgrid's TAG_KEY (it only checks the prefix)


def parse_tags(pairs: list[str]) -> dict[str, str]:
    """`--lg-place-tags key=value` (repeatable) -> {key: value}; a malformed pair is a
    ConfigError naming it."""
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not value or "=" in value or not _TAG_KEY.match(key):
            raise ConfigError(f"--lg-place-tags {pair!r}: expected key=value, the key lowercase "
                              "letters, digits and _ (labgrid's tag keys), e.g. soc=SM8650")
        tags[key] = value
    return tags


def coordinator_address(value: str | None) -> str | None:
    """--lg-coordinator, else $LG_COORDINATOR (labgrid's own variable), as HOST:PORT."""
    value = value or os.environ.get("LG_COORDINATOR") or None
    if value is not None:
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--lg-coordinator / LG_COORDINATOR must be HOST:PORT, got {value!r}")
    return value


def load_exporter_config(path) -> dict:
    """A labgrid exporter config (`device_configs/farms/labgrid-*.yaml`), read the way
    labgrid-exporter reads it (a Jinja2 template of YAML): groups of resources."""
    import contextlib
    import io

    from labgrid.remote.config import ResourceConfig

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it rendered
            data = ResourceConfig(str(path)).data
    except Exception as exc:  # noqa: BLE001  (template, YAML or file errors, as labgrid raises them)
        raise ConfigError(f"{path}: not a labgrid exporter config: {exc}") from None
    if not isinstance(data, dict) or not data or not all(
            isinstance(group, dict) and group for group in data.values()):
        raise ConfigError(f"{path}: a labgrid exporter config maps each group name to its "
                          "resources (e.g. `phone-a: {NetworkService: {address: ..., port: ..., "
                          "username: ...}}`)")
    return data


def slug(text: str) -> str:
    """A tag value: lowercase letters, digits and _ (what `labgrid-client set-tags` accepts)."""
    return re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")[:40] or "unknown"


@dataclasses.dataclass
class Lease:
    """An acquired place and the phone its tags describe."""

    place: str
    token: str  # the reservation's
    serial: str
    adb: str | None  # adb server HOST:PORT from the `adb=` tag
    soc: str | None  # from the `soc=` tag
    tags: dict[str, str]

    @property
    def label(self) -> str:
        return f"{self.place} ({self.serial})"


class LabgridFarm:
    """One process's view of the farm: reserve and acquire places matching `tags`, release
    them, retire (tag and release) the ones whose phone failed."""

    def __init__(self, coordinator: str, tags: dict[str, str], *, wait_s: float = WAIT_S,
                 notice: Callable[[str], None] | None = None) -> None:
        self.coordinator = coordinator
        self.tags = dict(tags)
        self.wait_s = wait_s
        self.notice = notice or (lambda line: _log.warning(line))
        self.leases: list[Lease] = []  # held now
        self.retired: dict[str, str] = {}  # place -> why, this process
        self.events: list[str] = []  # what happened to places, for the summary
        self._tokens: set[str] = set()  # every reservation not yet cancelled
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self._loop = _client_loop()
        self._session: Any = None  # labgrid's ClientSession, once started
        self._closed = False
        self._session = self._call(self._start(), timeout=CALL_S)
        atexit.register(self.close)

    def event(self, text: str) -> None:
        """What happened to a place: logged, and kept for the session's summary."""
        _log.info("%s", text)
        self.events.append(text)

    # Coordinator calls (each a coroutine on the client's loop) ---------------------------
    async def _start(self):
        from labgrid.remote.client import ClientSession
        from labgrid.util.proxy import proxymanager

        address = proxymanager.get_grpc_address(self.coordinator, default_port=20408)
        session = ClientSession(address, self._loop)
        await session.start()
        return session

    def _call(self, coro, timeout: float = CALL_S):
        import asyncio
        import concurrent.futures

        import grpc

        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except grpc.aio.AioRpcError as exc:
            raise DeviceError(f"labgrid coordinator {self.coordinator}: {exc.details()}") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise DeviceError(f"labgrid coordinator {self.coordinator}: no answer in "
                              f"{timeout:g} s") from None
        except Exception as exc:  # labgrid's ServerError / UserError, connection errors
            if isinstance(exc, DeviceError):
                raise
            raise DeviceError(f"labgrid coordinator {self.coordinator}: {exc}") from None

    def _stub(self, method: str, request):
        async def call():
            response = await getattr(self._session.stub, method)(request)
            await self._session.sync_with_coordinator()  # place updates are in before we read
            return response
        return self._call(call())

    @staticmethod
    def _pb2():
        from labgrid.remote.generated import labgrid_coordinator_pb2

        return labgrid_coordinator_pb2

    def _places(self) -> dict:
        return dict(self._session.places) if self._session is not None else {}

    def _reserve(self) -> str:
        pb2 = self._pb2()
        request = pb2.CreateReservationRequest(
            filters={"main": pb2.Reservation.Filter(filter=self.tags)}, prio=0.0)
        token = self._stub("CreateReservation", request).reservation.token
        self._tokens.add(token)
        return token

    def _poll(self, token: str):
        """(state name, allocated place or None); each poll refreshes the reservation's
        60 s timeout on the coordinator."""
        from labgrid.remote.common import Reservation

        try:
            response = self._stub("PollReservation",
                                  self._pb2().PollReservationRequest(token=token))
        except DeviceError as exc:
            if "does not exist" in str(exc):  # expired and removed by the coordinator
                return "expired", None
            raise
        res = Reservation.from_pb2(response.reservation)
        places = res.allocations.get("main") or [None]
        return res.state.name, places[0]

    def _cancel(self, token: str) -> None:
        if token in self._tokens:
            self._tokens.discard(token)
            try:
                self._stub("CancelReservation", self._pb2().CancelReservationRequest(token=token))
            except DeviceError:
                pass  # already expired and removed

    def _set_tags(self, place: str, tags: dict[str, str]) -> None:
        self._stub("SetPlaceTags", self._pb2().SetPlaceTagsRequest(placename=place, tags=tags))

    def _release(self, place: str) -> None:
        self._stub("ReleasePlace", self._pb2().ReleasePlaceRequest(placename=place))

    # Choosing a place ------------------------------------------------------------------------
    def _matching(self) -> dict[str, object]:
        """Places the reservation filter matches (labgrid also matches the tag `name`)."""
        return {name: p for name, p in self._places().items()
                if all(({**p.tags, "name": name}).get(k) == v for k, v in self.tags.items())}

    def _why_unusable(self, name: str, place) -> str:
        if name in self.retired:
            return f"retired by this session: {self.retired[name]}"
        if UNHEALTHY_TAG in place.tags:
            return f"tagged {UNHEALTHY_TAG}={place.tags[UNHEALTHY_TAG]}"
        return ""

    def _unmatched(self, place) -> str:
        """A match of the place that no exported, available resource satisfies (its exporter
        is gone), as text; "" when all are there."""
        paths = [(exporter, group, entry.cls, name)
                 for exporter, groups in self._session.resources.items()
                 for group, resources in groups.items()
                 for name, entry in resources.items() if entry.data and entry.avail]
        match = place.unmatched(paths)
        return repr(match) if match is not None else ""

    def _reclaim_stale(self) -> None:
        """Release places whose `hil_owner` is a dead process on this host (a worker killed
        before it could release, whatever its labgrid user), and cancel the reservation the dead process had for it. The
        tag is cleared first, so a place that another worker reclaims and acquires at the same
        time never shows the dead owner."""
        host = socket.gethostname()
        for name in self._matching():
            self._call(self._session.sync_with_coordinator())
            place = self._places().get(name)
            owner = place.tags.get(OWNER_TAG, "") if place is not None else ""
            o_host, _, pid = owner.rpartition(":")
            if (place is None or not place.acquired or o_host != host or not pid.isdigit() or
                    owner == self._owner or _alive(int(pid))):
                continue
            try:
                self._set_tags(name, {OWNER_TAG: ""})
                self._release(name)
                if place.reservation:  # else it holds the place until it expires (60-75 s)
                    self._stub("CancelReservation",
                               self._pb2().CancelReservationRequest(token=place.reservation))
            except DeviceError as exc:
                self.notice(f"labgrid: cannot release {name}, left acquired by dead process "
                            f"{owner}: {exc}")
                continue
            self.event(f"released {name}: left acquired by dead process {owner}")

    def lease(self) -> Lease:
        """Reserve by tags, wait, acquire and return the place's phone. Raises DeviceError when
        no usable place matches, or none became free within `wait_s`."""
        self._reclaim_stale()
        held: list[str] = []  # reservations allocated to places we will not use
        token = None
        deadline = time.monotonic() + self.wait_s
        try:
            while True:
                matching = self._matching()
                usable = [n for n, p in matching.items() if not self._why_unusable(n, p)]
                if not usable:
                    raise DeviceError(self._none_left(matching))
                token = token or self._reserve()
                state, name = self._poll(token)
                for other in held:
                    self._poll(other)  # keep them allocated while we wait
                if state in ("expired", "invalid"):
                    self._cancel(token)
                    token = None
                    continue
                if name is None:  # waiting
                    if time.monotonic() > deadline:
                        raise DeviceError(self._none_free(matching))
                    time.sleep(POLL_S)
                    continue
                place = self._places().get(name)
                why = self._why_unusable(name, place) if place is not None else "deleted"
                if not why:
                    lease, why = self._acquire(name, place, token)
                    if lease is not None:
                        return lease
                self.notice(f"labgrid: skipping place {name}: {why}")
                held.append(token)
                token = None
        except BaseException:
            if token is not None:
                self._cancel(token)
            raise
        finally:
            for other in held:
                self._cancel(other)

    def _acquire(self, name: str, place, token: str) -> tuple[Lease | None, str]:
        """Acquire an allocated place; (lease, "") or (None, why it cannot be used)."""
        serial = place.tags.get("serial", "")
        unmatched = self._unmatched(place)
        if not serial or unmatched:
            reason = "no_serial_tag" if not serial else "no_resource"
            detail = ("its tags have no serial=<adb serial>" if not serial else
                      f"match {unmatched} finds no exported resource (is its exporter running?)")
            self._mark(name, reason, detail)
            return None, detail
        try:
            self._stub("AcquirePlace", self._pb2().AcquirePlaceRequest(placename=name))
        except DeviceError as exc:
            self.retired[name] = f"cannot acquire: {exc}"  # this process only: not the phone's fault
            return None, f"cannot acquire: {exc}"
        lease = Lease(name, token, serial, place.tags.get("adb") or None,
                      place.tags.get("soc") or None, dict(place.tags))
        self.leases.append(lease)
        try:
            self._set_tags(name, {OWNER_TAG: self._owner})
        except DeviceError:
            pass  # only for reclaiming after a crash
        self.event(f"acquired {lease.label}")
        return lease, ""

    def _none_left(self, matching: dict) -> str:
        tags = " ".join(f"{k}={v}" for k, v in self.tags.items())
        if not matching:
            return (f"labgrid coordinator {self.coordinator}: no place has the tags {tags} "
                    "(labgrid-client places; labgrid-client -p P show)")
        why = "; ".join(f"{n}: {self._why_unusable(n, p)}" for n, p in sorted(matching.items()))
        return (f"labgrid: every place with the tags {tags} is unhealthy ({why}); clear a "
                f"repaired one with `labgrid-client -p PLACE set-tags {UNHEALTHY_TAG}=`")

    def _none_free(self, matching: dict) -> str:
        tags = " ".join(f"{k}={v}" for k, v in self.tags.items())
        busy = "; ".join(f"{n}: acquired by {p.acquired}" if p.acquired else f"{n}: reserved"
                         for n, p in sorted(matching.items()))
        return (f"labgrid: no place with the tags {tags} became free within {self.wait_s:g} s "
                f"({busy})")

    # Giving places back ------------------------------------------------------------------------
    def _mark(self, place: str, reason: str, detail: str) -> None:
        self.retired[place] = f"{reason}: {detail}"
        try:
            self._set_tags(place, {UNHEALTHY_TAG: slug(reason)})
        except DeviceError as exc:
            self.notice(f"labgrid: cannot tag {place} {UNHEALTHY_TAG}: {exc}")
        self.event(f"marked {place} {UNHEALTHY_TAG}={slug(reason)}: {detail}")

    def retire(self, lease: Lease, reason: str, detail: str) -> None:
        """The phone failed (preflight, offline for good): tag the place unhealthy, then release
        it and cancel its reservation, so no one (this process included) gets it again."""
        self._mark(lease.place, reason, detail)
        self.release(lease)

    def release(self, lease: Lease) -> None:
        if lease in self.leases:
            self.leases.remove(lease)
            try:
                self._set_tags(lease.place, {OWNER_TAG: ""})
                self._release(lease.place)
                self.event(f"released {lease.label}")
            except DeviceError as exc:
                self.notice(f"labgrid: cannot release {lease.place}: {exc}")
        self._cancel(lease.token)

    def close(self) -> None:
        """Release every held place and cancel every reservation; idempotent (also atexit)."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._session is None:
            return
        for lease in list(self.leases):
            self.release(lease)
        for token in list(self._tokens):
            self._cancel(token)

        async def stop():
            await self._session.stop()
            await self._session.close()
        try:
            self._call(stop(), timeout=5)
        except DeviceError:
            pass


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _client_loop() -> asyncio.AbstractEventLoop:
    """The event loop every labgrid client session of this process runs on, in a daemon
    thread (gRPC's asyncio support takes one loop per process)."""
    import asyncio

    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="labgrid-client",
                             daemon=True).start()
        return _LOOP


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
