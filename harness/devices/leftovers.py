"""Workspaces that sessions left on a device, and which of them may go.

A session killed outright (SIGKILL, an OOM kill, a lost lease) never removes its workspace
(`/data/local/tmp/executorch-hil-<id>-gw0`: runner, libraries, programs, several MB each), and
nothing else did. Every workspace carries the harness's marker (`harness.devices.workspace`),
which names its owner as the device lease names a holder; so the lease's own rules say whether
that owner is gone:

- the owner holds the device's lease now (fresh, or held by a live process of this host): live;
- the owner is a process of this host (same host name and boot id): live while that pid runs
  (with its start time, so a reused pid is not the owner), gone once it does not;
- otherwise the owner does not hold the lease: the lease is free, stale, held by a process of
  this host that no longer runs, or held by another session (one session per device: a session
  that lost its lease no longer uses the device) -- gone.

What happens to each:

- `gone`: a session reclaims it when it starts (one listing call; a notice names each
  workspace, its owner and why), and `python -m harness workspaces --remove` removes it;
- `kept` (gone, but its session was told `--keep-workspace`) and `unknown` (a marker of an
  earlier harness version, naming no owner: gone only when no other session holds the lease)
  are removed only when asked (`workspaces --remove --all`);
- `live` ones are never touched.

Only directories holding the marker are considered (`<scratch>/*/`, two levels below that too;
hidden names are not searched), and a removal follows the workspace rules (its entries, the
directory only if the harness created it, its counted parents) after killing the processes
still running in it, and only if the marker still names the owner it was judged by.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from harness.devices import workspace as ws_rules
from harness.devices.lease import Holder, clean, pid_alive
from harness.devices.remote_run import kill_in_directory

q = ws_rules.q
# A shell on the device: run(command, timeout) -> (exit code, output), as the lease's.
Run = Callable[[str, float], tuple[int, str]]
DEPTH = 3  # marker files are looked for this many levels below the scratch area


@dataclasses.dataclass(frozen=True)
class LeaseState:
    """The device's lease as leftovers are judged by: its holder's token (cleaned, "" when
    there is none or it names none yet), whether that holder holds it (`live`), whether the
    caller is that holder (`ours`), and how to say it."""

    token: str
    live: bool
    ours: bool
    words: str

    @classmethod
    def held_by_caller(cls, token: str) -> LeaseState:
        """The caller (a session, or the command with --remove) holds the lease."""
        return cls(clean(token), True, True, "this process holds the device's lease")

    @classmethod
    def of(cls, holder: Holder | None, stale_s: int) -> LeaseState:
        """The lease as `holder` (None: no lease on the device) stands."""
        if holder is None:
            return cls("", False, False, "no session holds the device's lease")
        token = clean(holder.get("token")) if holder.get("token") else ""
        if not token:
            return cls("", True, False, "a session is taking the device's lease right now")
        who = holder.describe()
        if holder.dead_here():
            return cls(token, False, False, f"the device's lease is held by {who}, a process "
                                            "of this host that no longer runs")
        if not holder.here() and holder.age is not None and holder.age > stale_s:
            return cls(token, False, False, f"the device's lease is stale: {who}")
        return cls(token, True, False, f"the device's lease is held by {who}")


@dataclasses.dataclass(frozen=True)
class Leftover:
    """A marked workspace on the device, how its owner stands, and why."""

    path: PurePosixPath
    fields: dict[str, str]
    size_kb: int | None
    state: str  # live, gone, kept, unknown
    reason: str

    @property
    def token(self) -> str:
        return self.fields.get("token", "")

    def owner(self) -> str:
        f = self.fields
        if not f.get("token"):
            return "an owner it does not name (a marker of an earlier harness version)"
        return (f"host {f.get('host', '?')} pid {f.get('pid', '?')} session "
                f"{f.get('session', '?')} worker {f.get('worker', '?')}")

    def size(self) -> str:
        if self.size_kb is None:
            return "size unknown"
        return (f"{self.size_kb / 1024:.1f} MB" if self.size_kb >= 1024
                else f"{self.size_kb} kB")


def list_script(scratch: PurePosixPath) -> str:
    """Shell code that prints, for each marker up to `DEPTH` levels below `scratch`, its
    directory relative to `scratch` (`HARNESS_WSL`), the marker's lines (`HARNESS_WSF`) and its
    size in kB (`HARNESS_WSK`)."""
    globs = " ".join(f"\"$S\"/{'*/' * depth}{ws_rules.MARKER}" for depth in range(1, DEPTH + 1))
    return (f"S={q(str(scratch))}; for m in {globs}; do [ -f \"$m\" ] || continue; "
            "d=${m%/*}; echo \"HARNESS_WSL ${d#\"$S\"/}\"; sed 's/^/HARNESS_WSF /' \"$m\"; "
            "k=$(du -sk \"$d\" 2>/dev/null); echo \"HARNESS_WSK ${k%%[!0-9]*}\"; done; true")


def parse_listing(output: str, scratch: PurePosixPath
                  ) -> list[tuple[PurePosixPath, dict[str, str], int | None]]:
    """`list_script`'s output: (directory, marker fields, size in kB) per workspace. A
    directory whose name the workspace rules would refuse is not the harness's: skipped."""
    found: list[tuple[PurePosixPath, dict[str, str], int | None]] = []
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        if head == "HARNESS_WSL":
            found.append((scratch / rest, {}, None))
        elif head == "HARNESS_WSF" and found and "=" in rest:
            key, _, value = rest.partition("=")
            found[-1][1].setdefault(key.strip(), value.strip())
        elif head == "HARNESS_WSK" and found and rest.strip().isdigit():
            found[-1] = (found[-1][0], found[-1][1], int(rest.strip()))
    return [f for f in found if ws_rules.plain(str(f[0])) and scratch in f[0].parents
            and ".." not in f[0].parts]


def classify(path: PurePosixPath, fields: dict[str, str], size_kb: int | None,
             lease: LeaseState) -> Leftover:
    """How the owner of the workspace at `path` (its marker's `fields`) stands, by the lease's
    rules (see the module docstring)."""
    token = fields.get("token", "")
    owner = Holder(fields)

    def made(state: str, reason: str) -> Leftover:
        if state == "gone" and fields.get("keep") == "1":
            state, reason = "kept", f"{reason}; its session kept it (--keep-workspace)"
        return Leftover(path, dict(fields), size_kb, state, reason)

    if not token:
        if lease.live and not lease.ours:
            return made("live", f"its marker names no owner and {lease.words}: it may be in use")
        return made("unknown", "its marker names no owner (an earlier harness version's); no "
                               "other session holds the device's lease")
    if token == lease.token and lease.live:
        return made("live", "it is this process's" if lease.ours
                    else "its owner holds the device's lease")
    if owner.here():
        if pid_alive(owner.get("pid"), owner.get("pidstart")):
            return made("live", f"its process, pid {owner.get('pid')}, still runs on this host")
        return made("gone", f"its process, pid {owner.get('pid')} of this host, no longer runs")
    return made("gone", f"its owner does not hold the device's lease ({lease.words})")


def find(run: Run, scratch: PurePosixPath, lease: LeaseState,
         skip: Iterable[PurePosixPath] = (), timeout: float = 60.0) -> list[Leftover]:
    """Every marked workspace below `scratch` but `skip`, judged against `lease`."""
    _, out = run(list_script(scratch), timeout)
    skipped = set(skip)
    return [classify(path, fields, size, lease)
            for path, fields, size in parse_listing(out, scratch) if path not in skipped]


def remove_script(leftovers: Iterable[Leftover], scratch: PurePosixPath,
                  legacy: bool = False) -> str:
    """Shell code that removes each leftover by the workspace rules, if its marker still names
    the owner it was judged by, after killing the processes running in it. Prints
    `HARNESS_WSR <index>` and then `HARNESS_WS <outcome>` (removed, kept ..., adopted,
    nomarker, changed) for each (by index: a path in the output could be rewritten on the
    way, as the loopback device does)."""
    parts = []
    for index, left in enumerate(leftovers):
        marker = q(str(left.path / ws_rules.MARKER))
        parts.append(
            f"echo HARNESS_WSR {index}; ( "
            f"[ -f {marker} ] && [ \"$(sed -n 's/^token=//p' {marker})\" = {q(left.token)} ] "
            "|| { echo HARNESS_WS changed; exit 0; }; "
            f"{kill_in_directory(left.path, below=True)}; "
            f"{ws_rules.remove_script(left.path, (), scratch, legacy=legacy)} ); ")
    return "".join(parts) + "true"


def outcomes(output: str) -> dict[int, str]:
    """`remove_script`'s output: what happened to each workspace (by index), in words."""
    words: dict[int, str] = {}
    current: int | None = None
    for line in output.splitlines():
        if line.startswith("HARNESS_WSR ") and line.split()[-1].isdigit():
            current = int(line.split()[-1])
        elif line.startswith("HARNESS_WS ") and current is not None:
            how = line[len("HARNESS_WS "):].strip()
            words[current] = (
                "removed" if how == "removed" else
                "emptied of the harness's entries (the directory is the user's)"
                if how == "adopted" else
                f"emptied of the harness's entries; the directory stays: it holds files the "
                f"harness did not write ({how[len('kept'):].strip() or 'entries'})"
                if how.startswith("kept") else
                "left as it is: its marker changed meanwhile (another session took it)")
            current = None
    return words


def remove(run: Run, leftovers: list[Leftover], scratch: PurePosixPath, legacy: bool = False,
           timeout: float = 120.0) -> dict[PurePosixPath, str]:
    """Remove `leftovers` (one shell call); what happened to each, in words."""
    if not leftovers:
        return {}
    _, out = run(remove_script(leftovers, scratch, legacy), timeout)
    done = outcomes(out)
    return {left.path: done.get(index, "not removed: the device did not say why")
            for index, left in enumerate(leftovers)}
