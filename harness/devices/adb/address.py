"""Where the adb server is: `--adb-server HOST:PORT`, else the variables adb itself reads.

Its own module, free of adbutils, because adbutils reads `ANDROID_ADB_SERVER_PORT` when it is
imported and dies on a value that is not a number (`ValueError`, an INTERNALERROR in pytest):
the modules that import adbutils call `check_environment()` first, so a bad value is one
ConfigError (a usage error at start-up) that names the variable.
"""

from __future__ import annotations

import os

from harness.errors import ConfigError


def check_environment() -> None:
    """Refuse an ANDROID_ADB_SERVER_PORT that is not a port number (before adbutils reads it)."""
    adb_server_address(None)


def adb_server_address(server: str | None = None) -> tuple[str, int]:
    """(host, port) of the adb server: --adb-server HOST:PORT, else ANDROID_ADB_SERVER_ADDRESS /
    ANDROID_ADB_SERVER_PORT, else 127.0.0.1:5037. A malformed value is a ConfigError naming
    where it came from, so a typo stops the session at start-up, not in a socket call."""
    if server:
        host, _, port = server.rpartition(":")
        where = "--adb-server"
        if not host or not port.isdigit():
            raise ConfigError(f"--adb-server must be HOST:PORT, got {server!r}")
    else:
        host = os.environ.get("ANDROID_ADB_SERVER_ADDRESS", "127.0.0.1")
        port = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
        where = "ANDROID_ADB_SERVER_PORT"
        if not port.isdigit():
            raise ConfigError(f"{where} must be a port number, got {port!r}")
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"{where}: port {port} is out of range (1-65535), got {server or port!r}")
    return host, int(port)
