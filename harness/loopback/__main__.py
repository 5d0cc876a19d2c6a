"""Run a loopback device from the command line, for manual use or as a harness subprocess.

    python -m harness.loopback [--port N] [--sandbox DIR] [--prop key=value ...]
                               [--env KEY=VALUE ...] [--no-connect] [--adb PATH]

`--prop ro.product.cpu.abi=arm64-v8a` starts it in arm64 mode: pushed aarch64 programs run
under qemu-aarch64 (see harness/loopback/emulation.py), and the host's HTP simulator
environment is not given (an arm64 device cannot load the x86_64 QNN libraries).

Prints exactly one line, `serial: 127.0.0.1:<port>`, to stdout once the device is reachable
(and, unless --no-connect, attached to the adb server), then serves until SIGTERM/SIGINT, after
which it disconnects the device from adb and exits 0. Diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from . import AdbCommandError, LoopbackDevice, connect, disconnect, start_server
from .emulation import is_arm64_mode


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    """The CLI definition (separate so it can be inspected in tests)."""
    p = argparse.ArgumentParser(prog="python -m harness.loopback", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: pick a free one)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    p.add_argument("--sandbox", type=Path, default=None, help="device filesystem dir (default: temp dir)")
    p.add_argument("--prop", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="device property (repeatable), overrides the SM8650 defaults")
    p.add_argument("--env", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for device shell commands (repeatable)")
    p.add_argument("--no-simulator-env", action="store_true",
                   help="do not give shell commands the HTP simulator's environment (by default "
                        "the device runs pushed QNN programs on the host's HTP simulator; "
                        "never given in arm64 mode)")
    p.add_argument("--no-connect", action="store_true", help="do not `adb connect` the device")
    p.add_argument("--adb", default="adb", help="adb client binary (default: adb on PATH)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging to stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    """Start, announce the serial, serve until signalled, clean up."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    done = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    env = {}
    if not args.no_simulator_env and not is_arm64_mode(dict(args.prop)):
        from harness.errors import HarnessError
        from harness.qnn.sdk import discover

        try:
            env.update(discover().device_environment())
        except HarnessError as exc:
            print(f"loopback: {exc}", file=sys.stderr)
            return 1
    env.update(dict(args.env))
    device = LoopbackDevice(
        sandbox=args.sandbox,
        properties=dict(args.prop),
        host=args.host,
        port=args.port,
        extra_env=env or None,
    ).start()
    connected = False
    try:
        if not args.no_connect:
            start_server(args.adb)
            connect(device.serial, adb=args.adb)
            connected = True
        sys.stdout.write(f"serial: {device.serial}\n")
        sys.stdout.flush()
        while not done.wait(0.5):
            pass
    except AdbCommandError as exc:
        print(f"loopback: {exc}", file=sys.stderr)
        return 1
    finally:
        if connected:
            try:
                disconnect(device.serial, adb=args.adb, missing_ok=True)
            except AdbCommandError as exc:
                print(f"loopback: {exc}", file=sys.stderr)
        device.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
