"""What a phone's performance depends on, read at the start and end of a session for reports:
the cpufreq governor (and current frequency) of each CPU policy, the thermal zones'
temperatures and the battery (level, temperature, charging status).

One shell command per reading, through `Device.command`, so it works on any adb device (and on
the loopback device, which answers from the host it runs on). The HTP simulator runs on the
host and has none of these: its reading says so instead of reporting the host's.
"""

from __future__ import annotations

import time

from harness.errors import HarnessError

SIMULATOR_REASON = ("the HTP simulator runs on the host: there is no phone cpufreq governor, "
                    "thermal zone or battery to read")

# One line per fact, tagged, so a missing file only loses its own line.
_SCRIPT = r"""
for p in /sys/devices/system/cpu/cpufreq/policy*; do
  [ -r "$p/scaling_governor" ] || continue
  echo "gov ${p##*/} $(cat "$p/scaling_governor" 2>/dev/null) $(cat "$p/scaling_cur_freq" 2>/dev/null) $(cat "$p/related_cpus" 2>/dev/null)"
done
for z in /sys/class/thermal/thermal_zone*; do
  [ -r "$z/temp" ] || continue
  echo "thermal ${z##*/} $(cat "$z/type" 2>/dev/null | tr ' ' _) $(cat "$z/temp" 2>/dev/null)"
done
if command -v dumpsys >/dev/null 2>&1; then dumpsys battery 2>/dev/null | sed 's/^/battery /'; fi
true
"""  # noqa: E501 (a shell script: one echo a fact)
_BATTERY_KEYS = {"level": "level", "scale": "scale", "temperature": "temperature_decidegC",
                 "status": "status", "health": "health", "voltage": "voltage_mV",
                 "AC powered": "ac_powered", "USB powered": "usb_powered",
                 "Wireless powered": "wireless_powered", "present": "present"}
# BatteryManager.BATTERY_STATUS_* as dumpsys prints them (numbers).
_BATTERY_STATUS = {"1": "unknown", "2": "charging", "3": "discharging", "4": "not charging",
                   "5": "full"}


def unavailable(reason: str) -> dict:
    """A reading of a device that has no state of its own to read (the simulator's)."""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "available": False, "reason": reason}


def read_state(device) -> dict:
    """The device's governors, thermal zones and battery now (see docs/results-schema.md), by
    one shell command through `device.command`: `Device.read_state`'s default."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:
        code, out = device.command(["sh", "-c", _SCRIPT], timeout=30.0)
    except (HarnessError, OSError) as exc:
        return {"time": when, "available": False, "reason": f"could not read the device: {exc}"}
    state = parse_state(out)
    state["time"] = when
    state["available"] = True
    missing = [name for name, key in (("cpufreq governor", "cpufreq"),
                                      ("thermal zones", "thermal"), ("battery", "battery"))
               if not state[key]]
    if missing:
        state["missing"] = missing
    if code != 0:
        state["exit_code"] = code
    return state


def parse_state(text: str) -> dict:
    cpufreq: dict[str, dict] = {}
    thermal: dict[str, dict] = {}
    battery: dict[str, object] = {}
    for line in text.splitlines():
        tag, _, rest = line.strip().partition(" ")
        if tag == "gov":
            parts = rest.split()
            if len(parts) >= 2:
                cpufreq[parts[0]] = {"governor": parts[1],
                                     "cur_khz": _int(parts[2]) if len(parts) > 2 else None,
                                     "cpus": " ".join(parts[3:])}
        elif tag == "thermal":
            parts = rest.split()
            if len(parts) >= 3:
                thermal[parts[0]] = {"type": parts[1], "temp_millideg_c": _int(parts[2])}
        elif tag == "battery" and ":" in rest:
            key, _, value = rest.strip().partition(":")
            name = _BATTERY_KEYS.get(key.strip())
            if name:
                value = value.strip()
                battery[name] = _int(value) if _int(value) is not None else value
    if "status" in battery:
        battery["status_name"] = _BATTERY_STATUS.get(str(battery["status"]), str(battery["status"]))
    return {"cpufreq": cpufreq, "thermal": thermal, "battery": battery}


def _int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None
