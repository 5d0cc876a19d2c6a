"""A loopback SM8650 'phone' attached to the real adb server, for a test module's fixture:

    @pytest.fixture(scope="module")
    def phone(tmp_path_factory):
        with attached_phone(tmp_path_factory.mktemp("phone")) as dev:
            yield dev
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from harness.loopback import LoopbackDevice, connect, disconnect, start_server
from harness.qnn.sdk import discover


@contextlib.contextmanager
def attached_phone(sandbox: Path) -> Iterator[LoopbackDevice]:
    """Started and `adb connect`ed; disconnected and stopped when the block ends."""
    start_server()
    dev = LoopbackDevice(sandbox, extra_env=discover().device_environment()).start()
    try:
        connect(dev.serial)
        yield dev
    finally:
        disconnect(dev.serial, missing_ok=True)
        dev.stop()
