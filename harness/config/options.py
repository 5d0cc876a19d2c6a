"""What a session was asked for: its command line, ini file and environment, read and checked
once (harness.plugin.options builds it; replay builds one for its target). Every layer that
opens or uses a device reads it, so it lives here, below them, and holds plain values only.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class Options:
    devices: list[str]
    simulator: bool
    soc: str | None
    device_config: Path | None
    artifacts_dir: Path  # this session's own directory (<--artifacts-dir>/<session_id>)
    keep_artifacts: bool
    runner: str
    runner_timeout: float | None
    abi_bridge: str
    keep_workspace: bool
    device_workspace: str | None
    worker: str  # pytest-xdist worker id, "master" without xdist
    worker_count: int
    session_id: str = ""
    # --farm: the farm file the devices came from (harness.config.load_farm); the adb kind reads
    # its adb server and the SoC of each serial from it.
    farm: Path | None = None
    # A device kind's own option values where no pytest config holds them (`harness replay`):
    # option dest -> value, read through OpenContext.option like the config's.
    kind_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    # --lease-wait: how long an adb device's set-up waits for the device lease another session
    # holds (harness/devices/lease.py); 0 fails at once, naming the holder.
    lease_wait: float = 0.0
    ptes: list[Path] = dataclasses.field(default_factory=list)  # --pte: the user's programs
    # --etrecord: a program's ETRecord, the reference of its outputs (else NAME.etrecord beside)
    etrecords: dict[Path, Path] = dataclasses.field(default_factory=dict)
    models_dirs: list[Path] = dataclasses.field(default_factory=list)  # --models-dir
    # How long adb waits for a device at the start and after it dropped off mid-session
    # (None: harness.devices.adb.device.CONNECT_S / REACQUIRE_S). Tests shorten them (reacquire_s
    # also from EXECUTORCH_HIL_REACQUIRE_S, e.g. for a farm run in a test).
    connect_s: float | None = None
    reacquire_s: float | None = None
    # A labgrid farm (harness/devices/farm.py): with place tags, each worker reserves a place with
    # those tags on the coordinator (HOST:PORT) instead of taking a --device.
    lg_coordinator: str | None = None
    lg_place_tags: dict[str, str] = dataclasses.field(default_factory=dict)
    # --scenario-isolation / --scenario-jobs (simulator): each scenario a fork of a pre-loaded
    # native runner ("fork") or a new process ("process"); how many run at once (0: one per
    # CPU) where a test runs independent scenarios (the ordering explorer).
    scenario_isolation: str = "fork"
    scenario_jobs: int = 0
    # --dsp-heap: ask QNN for DSP heap readings (auto: on Android devices with QNN only)
    dsp_heap: str = "auto"
    # --soak-cycles: load -> execute -> destroy cycles of each soak test (tests/hil/test_soak.py)
    soak_cycles: int = 16
    # --valgrind: the valgrind tool the simulator's runners run under ("" for none)
    valgrind: str = ""
