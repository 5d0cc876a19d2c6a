"""Loopback Android device: a Python adbd on 127.0.0.1 that the real adb server can attach.

It lets the harness run its real adb code paths (adb server, `adb shell`, push/pull, adbutils)
on machines where no phone can exist. See `adbd.py` for the device and its path mapping.

    with LoopbackDevice(tmp_path) as dev:
        connect(dev.serial)
        ...  # adb -s 127.0.0.1:<port> shell ..., adbutils, ...
        disconnect(dev.serial)
"""

from __future__ import annotations

import subprocess
import time

from harness.errors import HarnessError

from .adbd import DEFAULT_PROPERTIES, FEATURES, LoopbackDevice

__all__ = [
    "DEFAULT_PROPERTIES",
    "FEATURES",
    "AdbCommandError",
    "LoopbackDevice",
    "connect",
    "disconnect",
    "start_server",
]


class AdbCommandError(HarnessError):
    """An adb client command did not do what was asked; the message carries adb's output."""


def _run_adb(adb: str, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [adb, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError as exc:
        raise AdbCommandError(f"adb client not found: {adb!r}") from exc
    except subprocess.TimeoutExpired as exc:
        raise AdbCommandError(f"`{adb} {' '.join(args)}` timed out after {timeout}s") from exc


def _describe(proc: subprocess.CompletedProcess) -> str:
    out = (proc.stdout or "").strip()
    err = (proc.stderr or "").strip()
    return f"exit {proc.returncode}; stdout: {out!r}; stderr: {err!r}"


def start_server(adb: str = "adb") -> None:
    """Start the adb server if it is not running (adb commands would do it implicitly, but
    doing it first keeps the daemon's startup chatter out of later commands' output)."""
    proc = _run_adb(adb, "start-server")
    if proc.returncode != 0:
        raise AdbCommandError(f"`{adb} start-server` failed: {_describe(proc)}")


def connect(serial: str, adb: str = "adb", timeout: float = 10.0) -> str:
    """`adb connect <serial>` and wait until the server reports the device as "device".

    `adb connect` exits 0 even when it fails, so its output is checked; waiting for the state
    avoids a race where the first command after connecting sees the device "offline".
    """
    proc = _run_adb(adb, "connect", serial, timeout=timeout + 5)
    text = f"{proc.stdout}\n{proc.stderr}"
    if proc.returncode != 0 or "connected to" not in text or "failed" in text.lower():
        raise AdbCommandError(f"`{adb} connect {serial}` failed: {_describe(proc)}")
    deadline = time.monotonic() + timeout
    while True:
        state = _run_adb(adb, "-s", serial, "get-state", timeout=timeout)
        if state.returncode == 0 and state.stdout.strip() == "device":
            return serial
        if time.monotonic() > deadline:
            raise AdbCommandError(f"{serial} did not come online: {_describe(state)}")
        time.sleep(0.05)


def disconnect(serial: str, adb: str = "adb", missing_ok: bool = False) -> None:
    """`adb disconnect <serial>`; with missing_ok, a device the server already dropped is fine."""
    proc = _run_adb(adb, "disconnect", serial)
    text = f"{proc.stdout}\n{proc.stderr}"
    if proc.returncode == 0 and "disconnected" in text and "error" not in text.lower():
        return
    if missing_ok:
        return
    raise AdbCommandError(f"`{adb} disconnect {serial}` failed: {_describe(proc)}")
