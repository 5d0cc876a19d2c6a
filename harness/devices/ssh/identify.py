"""What a Linux board says about itself, in one command: machine, SoC, model, home.

The SoC is read from `/sys/devices/soc0/machine` (a name such as "SM8550" or "QCS6490"), the
device tree's `compatible` ("qcom,qcs6490-rb3gen2", "qcom,sm8550") and `model`, then mapped
to a SoC config: a known SoC name, else a `board_platforms` code name of one. The numeric
`/sys/devices/soc0/soc_id` is kept for the report only (the configs list no numeric ids). An
x86_64 "board" (CI's localhost sshd) runs the HTP simulator, so it takes the simulator's SoC.
"""

from __future__ import annotations

import dataclasses
import re

from harness.config import known_socs, simulator_config, soc_for_board_platform

FIELDS = ("uname -m", "cat /sys/devices/soc0/machine",
          "cat /sys/devices/soc0/soc_id", "tr '\\0' ' ' < /proc/device-tree/model",
          "tr '\\0' ' ' < /proc/device-tree/compatible", "printf %s \"$HOME\"",
          "uname -sr", "hostname", "id -un")
SCRIPT = "; ".join(f"{{ {f}; }} 2>/dev/null; echo; echo @@" for f in FIELDS)


@dataclasses.dataclass(frozen=True)
class BoardIdentity:
    name: str  # the target as written
    machine: str  # `uname -m`
    soc: str  # "" when nothing the board says maps to a config
    soc_source: str  # where the SoC came from, or why there is none
    soc_id: str
    model: str
    compatible: str
    home: str
    kernel: str
    hostname: str
    user: str


def parse_identity(name: str, out: str) -> BoardIdentity:
    values = [v.strip() for v in out.split("@@")][:len(FIELDS)]
    values += [""] * (len(FIELDS) - len(values))
    machine, soc_machine, soc_id, model, compatible, home, kernel, host, user = values
    soc, source = soc_from(soc_machine, compatible, model)
    if not soc and machine == "x86_64":
        soc = simulator_config().default_soc
        source = "an x86_64 board runs the HTP simulator, of its default SoC"
    return BoardIdentity(name, machine, soc, source, soc_id, model, compatible, home, kernel,
                         host, user)


def soc_from(machine: str, compatible: str, model: str) -> tuple[str, str]:
    """(SoC, where it came from), or ("", why none) from what the board's files say."""
    known = {s.upper(): s for s in known_socs()}
    candidates = [("/sys/devices/soc0/machine", machine)]
    candidates += [("/proc/device-tree/compatible", t.split(",", 1)[1])
                   for t in compatible.split() if t.startswith("qcom,") and "," in t]
    candidates += [("/proc/device-tree/model", t) for t in re.findall(r"[A-Za-z]+\d+[A-Za-z]*",
                                                                       model)]
    for where, value in candidates:
        for part in (value, value.split("-")[0]):
            if part.upper() in known:
                return known[part.upper()], f"{where}={value}"
            platform = soc_for_board_platform(part.lower())
            if platform:
                return platform, f"{where}={value} (board_platforms)"
    said = ", ".join(f"{w}={v!r}" for w, v in candidates if v) or "none of " \
        "/sys/devices/soc0/machine, /proc/device-tree/{model,compatible} is readable"
    return "", f"the board's SoC is in no SoC config ({said})"
