"""`python -m harness workspaces --device SERIAL [--remove [--all]]`: the workspaces sessions
left on a phone, and their removal.

Sessions reclaim the leftovers of killed sessions themselves when they start; this command is
for a phone no session will use soon, for workspaces kept on request (`--keep-workspace`) and
for those of an earlier harness version, whose marker names no owner. It lists every workspace
holding the harness's marker below /data/local/tmp with its size, its owner and how that owner
stands by the device lease's rules (`harness.devices.leftovers`); `--remove` removes those
whose owner is gone, `--remove --all` also the kept ones and those naming no owner (never one
whose owner is live). To remove, it takes the device's lease when it is free (so no session
starts meanwhile), else it judges against the holder, whose own workspace stays.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from harness.errors import ConfigError, HarnessError

if TYPE_CHECKING:
    from harness.devices.leftovers import LeaseState, Leftover

USAGE = "python -m harness workspaces --device SERIAL [--adb-server HOST:PORT] [--remove [--all]]"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness workspaces",
        description="List the workspaces sessions left on an adb device; remove those whose "
                    "owner is gone (docs/phone.md, 'Leftover workspaces').")
    parser.add_argument("--device", required=True, metavar="SERIAL",
                        help="the phone: an adb serial, host:port or adb://SERIAL")
    parser.add_argument("--adb-server", default=None, metavar="HOST:PORT",
                        help="adb server to use (default: ANDROID_ADB_SERVER_ADDRESS/PORT or "
                             "127.0.0.1:5037)")
    parser.add_argument("--remove", action="store_true",
                        help="remove the workspaces whose owner is gone")
    parser.add_argument("--all", action="store_true",
                        help="with --remove: also those kept on request (--keep-workspace) and "
                             "those of an earlier harness version (no owner named), unless a "
                             "session holds the device")
    return parser


def main(argv: list[str]) -> int:
    """List (and with --remove, remove) the leftover workspaces on one adb device. Exit 0 when
    done, 1 when the device cannot be asked, 2 on a usage error."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.all and not args.remove:
        print(f"usage: {USAGE}: --all goes with --remove", file=sys.stderr)
        return 2
    try:
        return _run(args)
    except ConfigError as exc:
        print(f"usage: {USAGE}: {exc}", file=sys.stderr)
        return 2
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from harness.devices import leftovers
    from harness.devices.adb import AdbKind
    from harness.devices.adb.address import adb_server_address
    from harness.devices.adb.device import CONNECT_S, WORKSPACE_BASE
    from harness.devices.adb.transport import AdbProxy, adb_client
    from harness.devices.kinds import kind_for
    from harness.devices.lease import STALE_S, DeviceLease, LeaseBusy

    if kind_for(args.device) is not AdbKind or not AdbKind.serial(args.device):
        raise ConfigError(f"--device {args.device!r}: this command takes an adb device (a "
                          "serial, host:port or adb://SERIAL); on a Linux board the workspaces "
                          "are below $HOME/.executorch-hil/ of the board's user")
    adb_server_address(args.adb_server)  # a malformed one: a clear error before any connection
    serial = AdbKind.serial(args.device)
    adb = AdbProxy(adb_client(args.adb_server), serial)
    adb.wait_online(CONNECT_S)
    lease = DeviceLease(adb.server, serial, adb.sh, session="workspaces-command", worker="cli",
                        notice=lambda line: print(f"notice: {line}", file=sys.stderr))
    try:
        if args.remove:
            try:
                lease.acquire(0)
                state = leftovers.LeaseState.held_by_caller(lease.token)
            except LeaseBusy as busy:
                state = leftovers.LeaseState.of(busy.holder, STALE_S)
        else:
            state = leftovers.LeaseState.of(lease.peek(), STALE_S)
        found = leftovers.find(adb.sh, WORKSPACE_BASE, state)
        _show(serial, found, state)
        if args.remove:
            wanted = ("gone", "kept", "unknown") if args.all else ("gone",)
            chosen = [left for left in found if left.state in wanted]
            done = leftovers.remove(adb.sh, chosen, WORKSPACE_BASE, legacy=args.all)
            for left in chosen:
                print(f"{left.path}: {done[left.path]}")
            if not chosen:
                print("nothing to remove")
        else:
            _advise(args.device, found)
    finally:
        lease.release()
    return 0


def _show(serial: str, found: list[Leftover], state: LeaseState) -> None:
    """One line per workspace: path, size, how its owner stands and why, who it is."""
    if not found:
        print(f"{serial}: no workspace of the harness below /data/local/tmp")
        return
    print(f"{serial}: {len(found)} workspace(s) of the harness ({state.words}):")
    for left in found:
        print(f"  {left.path}  {left.size()}  {left.state}: {left.reason}; owner {left.owner()}")


def _advise(device: str, found: list[Leftover]) -> None:
    """What --remove would do, and how to ask for it."""
    gone = [left for left in found if left.state == "gone"]
    more = [left for left in found if left.state in ("kept", "unknown")]
    if gone:
        total = sum(left.size_kb or 0 for left in gone) / 1024
        print(f"{len(gone)} left by sessions that are gone ({total:.1f} MB): remove them with "
              f"python -m harness workspaces --device {device} --remove")
    if more:
        print(f"{len(more)} kept on request or of an earlier harness version: "
              f"python -m harness workspaces --device {device} --remove --all removes them too")
