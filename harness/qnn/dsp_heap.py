"""DSP heap readings: which devices give them, and what their absence means.

A phone's HTP reports its DSP heap through QNN profiling: profile events of unit bytes named
`DSP:before_context_created`, `DSP:after_context_freed`, ... when a context is created from a
binary with the HTP context config DSP_MEMORY_PROFILING_ENABLED and a profile handle. The
interposer (harness/qnn/interposer.c) asks for them at every context create and free when
HARNESS_QNN_DSP_HEAP=1 and traces them; harness/qnn/trace.py replays them.

The host's HTP simulator has no DSP: its libQnnHtp refuses that config with
QNN_COMMON_ERROR_NOT_SUPPORTED (1000, measured with QAIRT 2.51), and ExecuTorch's host build
never asks for it. So `--dsp-heap auto` asks on Android devices with a QNN runtime only.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.errors import HarnessError

ENV = "HARNESS_QNN_DSP_HEAP"
SETTINGS = ("auto", "on", "off")
NOT_SUPPORTED = 1000  # QNN_COMMON_ERROR_NOT_SUPPORTED

SIMULATOR_NOTE = ("DSP heap: not available on the HTP simulator (it has no DSP; its libQnnHtp "
                  "refuses DSP memory profiling with QNN_COMMON_ERROR_NOT_SUPPORTED, 1000)")
DEVICE_NOTE = ("DSP heap: read through QNN DSP memory profiling at every context create and "
               "free")
OFF_NOTE = "DSP heap: not read (--dsp-heap off)"
STAND_IN_NOTE = ("DSP heap: not read (an x86_64 stand-in device runs the HTP simulator; "
                 "--dsp-heap on asks anyway)")
NO_QNN_NOTE = "DSP heap: not read (the device's runtime has no QNN backend)"


def wanted(setting: str, *, android_htp: bool) -> bool:
    """Whether runs ask QNN for DSP heap readings: `on` always, `off` never, `auto` on a
    device whose QNN libraries drive a real HTP (an Android phone)."""
    if setting not in SETTINGS:
        raise HarnessError(f"--dsp-heap must be one of {', '.join(SETTINGS)}, not {setting!r}")
    return setting == "on" or (setting == "auto" and android_htp)


def note(on: bool, *, android_htp: bool, simulator: bool = False) -> str:
    """What the report and the session summary say about a device's DSP heap reading."""
    if not on:
        return (SIMULATOR_NOTE if simulator else OFF_NOTE if android_htp else STAND_IN_NOTE)
    if android_htp:
        return DEVICE_NOTE
    where = "the HTP simulator" if simulator else "an x86_64 stand-in"
    return f"{DEVICE_NOTE} (asked for on {where}: --dsp-heap on)"


def requested(env: Mapping[str, str]) -> bool:
    """Whether runs with these variables ask for the reading (the interposer's setting)."""
    return env.get(ENV) == "1"


def error_name(code: int) -> str:
    return f"{code} (QNN_COMMON_ERROR_NOT_SUPPORTED)" if code == NOT_SUPPORTED else str(code)
