"""The loopback phone the adb tests share per module: an SM8650 'phone' on 127.0.0.1 attached
to the real adb server, running what is pushed to it on this host's HTP simulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.loopback import LoopbackDevice, connect, disconnect, start_server
from harness.qnn.sdk import discover


@pytest.fixture(scope="module")
def phone(tmp_path_factory) -> Iterator[LoopbackDevice]:
    start_server()
    dev = LoopbackDevice(tmp_path_factory.mktemp("phone"),
                         extra_env=discover().device_environment()).start()
    connect(dev.serial)
    yield dev
    disconnect(dev.serial, missing_ok=True)
    dev.stop()
