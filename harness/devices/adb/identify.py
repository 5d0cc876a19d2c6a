"""Phase 1 of an adb device: what it says about itself (SoC from `ro.soc.model`, else
`ro.board.platform` through the SoC configs' `board_platforms`; ABI; Android version), read in
one shell call, before any config is chosen for it."""

from __future__ import annotations

import dataclasses
import shlex

from harness.config import soc_for_board_platform
from harness.devices.adb.transport import AdbError, AdbProxy
from harness.errors import DeviceError

q = shlex.quote


@dataclasses.dataclass(frozen=True)
class DeviceIdentity:
    """What a device says about itself, before any config is chosen for it."""

    serial: str
    soc: str  # the SoC it reports; "" when neither property names one
    soc_source: str  # which property named it, or why none did (for messages)
    abi: str
    android: str
    model: str = ""
    board_platform: str = ""
    product: str = ""  # ro.product.name


IDENTITY_PROPS = ("ro.soc.model", "ro.board.platform", "ro.product.cpu.abi",
                  "ro.build.version.release", "ro.product.model", "ro.product.name")
LOOPBACK_PRODUCT = "loopback"  # ro.product.name of the harness's loopback device


def identify(adb: AdbProxy) -> DeviceIdentity:
    """Read the device's identity in one shell call. The SoC comes from `ro.soc.model`, else
    from the SoC config whose `board_platforms` lists `ro.board.platform` (older builds leave
    ro.soc.model empty). The harness talks to devices over the shell protocol v2 (exit codes,
    stdin with an end; Android 7 and later), so a device without it is refused here. An adb
    call that fails is an AdbError saying that its properties could not be read."""
    serial = adb.serial
    command = "; ".join(f"getprop {q(p)}; echo @@" for p in IDENTITY_PROPS)
    try:
        features = adb.features()
        if "shell_v2" not in features.split(","):
            raise DeviceError(f"{serial}: its adbd lacks the shell protocol v2 (features: "
                              f"{features or 'none'}); the harness needs it (Android 7 or later)")
        _, raw, _ = adb.shell(command, timeout=30)
    except AdbError as exc:
        raise exc.while_("cannot read its properties") from exc
    out = raw.decode("utf-8", errors="replace")
    values = [v.strip() for v in out.split("@@")][:len(IDENTITY_PROPS)]
    props = dict(zip(IDENTITY_PROPS, values + [""] * (len(IDENTITY_PROPS) - len(values))))
    soc, source = props["ro.soc.model"], "ro.soc.model"
    platform = props["ro.board.platform"]
    if not soc:
        soc = soc_for_board_platform(platform) or ""
        source = (f"ro.board.platform={platform}" if soc else
                  f"ro.soc.model is empty and ro.board.platform {platform!r} is in no SoC "
                  "config's board_platforms")
    return DeviceIdentity(serial, soc, source, props["ro.product.cpu.abi"],
                          props["ro.build.version.release"], props["ro.product.model"], platform,
                          props["ro.product.name"])
