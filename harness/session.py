"""Per-session state of the plugin: options, the device, the runner, configs, compiled models.

Created lazily, so a run that collects no HIL test (the framework's own tests) never builds a
runner or touches the QNN libraries.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from harness.compile import CompiledModel, compile_model
from harness.config import SocConfig, load_soc, resolve_soc_config, simulator_config, soc_config
from harness.devices.base import Device
from harness.errors import HarnessError, ModelError
from harness.models import get_model
from harness.qnn.sdk import QnnSdk, discover, executorch_version
from harness.runner.select import RunnerChoice, choose_runner
from harness.user_program import check_soc


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
    adb_server: str | None
    device_socs: dict[str, str]  # serial -> SoC, from a farm file (overrides what it reports)
    keep_workspace: bool
    device_workspace: str | None
    worker: str  # pytest-xdist worker id, "master" without xdist
    worker_count: int
    session_id: str = ""
    ptes: list[Path] = dataclasses.field(default_factory=list)  # --pte: the user's programs
    models_dirs: list[Path] = dataclasses.field(default_factory=list)  # --models-dir
    # How long adb waits for a device at the start and after it dropped off mid-session
    # (None: harness.devices.adb.CONNECT_S / REACQUIRE_S). No options: tests shorten them.
    connect_s: float | None = None
    reacquire_s: float | None = None


class HilSession:
    def __init__(self, options: Options) -> None:
        self.options = options
        self._device: Device | None = None
        self._device_error: HarnessError | None = None
        self._soc_config: SocConfig | None = None  # the device's, resolved when it is built
        self._sdk: QnnSdk | None = None
        self._runners: dict[str, RunnerChoice] = {}
        self._models: dict[tuple[str, str, str], CompiledModel] = {}
        self._programs: dict[Path, CompiledModel] = {}
        self.notices: list[str] = []

    # Pieces --------------------------------------------------------------------------------
    @property
    def sdk(self) -> QnnSdk:
        if self._sdk is None:
            self._sdk = discover()
        return self._sdk

    def runner_for(self, kind: str) -> RunnerChoice:
        """The runner a device uses when asked for `kind` ("native" or "python")."""
        if kind == "python":
            return self.runner("python")
        return self.runner("native" if self.options.runner == "native" else "auto")

    def runner(self, kind: str) -> RunnerChoice:
        if kind not in self._runners:
            choice = choose_runner(kind)
            if choice.notice:
                self.notices.append(choice.notice)
            self._runners[kind] = choice
        return self._runners[kind]

    @property
    def device_serial(self) -> str | None:
        """The device of this worker: worker N of an xdist run takes the Nth --device."""
        devices = self.options.devices
        if not devices or self.options.simulator:
            return None
        index = int(self.options.worker[2:]) if self.options.worker.startswith("gw") else 0
        return devices[index % len(devices)]

    @property
    def device(self) -> Device:
        """The session's device, built on first use. A device that cannot be built fails once:
        the same error is raised again, without touching adb, to every later caller."""
        if self._device is None:
            if self._device_error is not None:
                raise self._device_error
            try:
                self._device = self._make_device()
            except HarnessError as exc:
                self._device_error = exc
                raise
        return self._device

    def _make_device(self) -> Device:
        serial = self.device_serial
        if serial is None:
            from harness.devices.simulator import SimulatorDevice

            _ = self.soc_config  # resolve (and validate) the SoC before any work
            return SimulatorDevice(self.sdk, self._simulated_soc(), self.runner_for,
                                   self.options.abi_bridge)
        return self._open_adb_device(serial)

    def _open_adb_device(self, serial: str) -> Device:
        """An adb device in phases: identify it, resolve its SoC config, set it up with
        explicit arguments. Nothing here reads the half-built session: the config is stored
        only once the device works."""
        from pathlib import PurePosixPath

        from harness.devices import adb

        opts = self.options
        client = adb.adb_client(opts.adb_server)
        adb.wait_online(client, serial, opts.connect_s or adb.CONNECT_S)
        identity = adb.identify(client, serial)
        config, source = resolve_soc_config(
            serial, identity.soc, farm_soc=opts.device_socs.get(serial), soc=opts.soc,
            device_config=opts.device_config, reported_from=identity.soc_source)
        workspace = (PurePosixPath(opts.device_workspace) if opts.device_workspace
                     else adb.new_workspace(opts.worker))
        device = adb.AdbDevice(client, identity, config, workspace,
                               artifacts_dir=opts.artifacts_dir,
                               keep_workspace=opts.keep_workspace,
                               reacquire_s=opts.reacquire_s or adb.REACQUIRE_S,
                               soc_source=source, notice=self.notices.append)
        if self.runner_kind == "python":
            self.notices.append("adb devices always use the native runner; "
                                "--runner=python applies to the simulator only")
        from harness.runner.select import device_build

        payload = adb.device_payload(identity, device_build(identity.abi), config.htp_arch,
                                     workspace, sdk_root=os.environ.get("QNN_SDK_ROOT"),
                                     simulator_lib_dir=lambda: self.sdk.lib_dir)
        device.setup(payload.runner, payload.files, payload.env, payload.backends)
        self._soc_config = config
        return device

    def _simulated_soc(self) -> str:
        return self.options.soc or simulator_config().default_soc

    @property
    def soc(self) -> str:
        """The SoC scenarios are compiled for: the device's resolved one (the simulated one on
        the simulator)."""
        if self.device_serial is None:
            return self._simulated_soc()
        return self.device.info.soc

    @property
    def soc_config(self) -> SocConfig:
        """The resolved config of the session's device (building the device if needed); on the
        simulator, that of the simulated SoC, or --device-config's file."""
        if self._soc_config is None:
            if self.device_serial is None:
                if self.options.device_config is not None:
                    self._soc_config = load_soc(self.options.device_config)
                else:
                    self._soc_config = soc_config(self._simulated_soc())
            else:
                _ = self.device  # building it resolves and stores the config
        return self._soc_config  # type: ignore[return-value]

    @property
    def runner_kind(self) -> str:
        """What `Device.run` is asked for: "python" when requested, else "native"."""
        return "python" if self.options.runner == "python" else "native"

    @property
    def device_runner(self) -> str:
        """The runner scenarios really run in: adb devices always use the native one; the
        simulator uses the requested one, or Python when no native build is possible."""
        if self.device.info.kind == "adb":
            return "native"
        return self.runner_for(self.runner_kind).kind

    @property
    def timeout(self) -> float:
        """--runner-timeout, else the simulator's, else the device's resolved SoC config's."""
        if self.options.runner_timeout:
            return self.options.runner_timeout
        if self.device_serial is None:
            return simulator_config().runner_timeout_s
        return self.soc_config.runner_timeout_s

    @property
    def rss_leak_kb(self) -> int:
        """Rss growth tolerated over a reload cycle: the device's resolved SoC config's (the
        simulator's own unless --device-config is given)."""
        if self.device_serial is None and self.options.device_config is None:
            return simulator_config().rss_leak_kb
        return self.soc_config.rss_leak_kb

    @property
    def htp_context_kb(self) -> int:
        """dma-buf (HTP shared / spill-fill) memory allowed per live QNN context; the SoC's
        config value (the SoC being simulated, on the simulator, which allocates none)."""
        return self.soc_config.htp_context_kb

    def model(self, name: str, precision: str = "fp16",
              options: dict | None = None) -> CompiledModel:
        """The registry model `name` compiled for this session's SoC; `options` are QNN compile
        options (harness.compile.COMPILE_OPTIONS), e.g. {"multi_contexts": True}."""
        import json

        from harness.compile import normalize_options

        normalized = normalize_options(options)
        key = (name, precision, json.dumps(normalized, sort_keys=True))
        if key not in self._models:
            spec = get_model(name, extra_dirs=tuple(self.options.models_dirs))
            self._models[key] = compile_model(spec, self.soc, precision, self.sdk,
                                              self.options.artifacts_dir / "compile-logs",
                                              options=normalized, notice=self.notices.append)
        return self._models[key]

    def program(self, path: Path) -> CompiledModel:
        """A user's own `.pte` (harness.user_program): read, checked against the device's SoC,
        given inputs, and its reference taken from a solo run on this session's device."""
        from harness.driver import ScenarioDriver
        from harness.failures import run_failures
        from harness.program import read_program
        from harness.user_program import program_model, solo_scenario, with_reference

        path = Path(path).resolve()
        if path not in self._programs:
            info = read_program(path)
            device = self.device
            check_soc(info, device.info.soc, target_name(device.info))
            work = self.options.artifacts_dir / "programs" / f"{path.stem}-{info.sha256[:12]}"
            model = program_model(info, device.info.soc, work)
            driver = ScenarioDriver(device, work / "solo", self.timeout, self.runner_kind)
            result = driver.run(solo_scenario(model), allow_crash=True)
            failures = run_failures(result)
            if failures:
                raise ModelError(f"{path}: the solo run (one module, each method once, nothing "
                                 f"else live) failed, so the program has no reference output: "
                                 f"{failures[0].describe()}\nartifacts: {work / 'solo'}")
            self._programs[path] = with_reference(model, result, work / "reference")
        return self._programs[path]

    def header(self) -> list[str]:
        lines = [f"executorch {executorch_version()}; runner requested: {self.options.runner}"]
        try:
            lines.append(f"device: {self.device.info.header()}")
            lines.append(f"runner: {self.runner_for(self.runner_kind).kind}")
        except HarnessError as exc:
            lines.append(f"device unavailable: {exc}")
        lines += [f"notice: {n}" for n in self.notices]
        return lines

    def summary(self) -> list[str]:
        return self._device.summary() if self._device is not None else []

    def close(self) -> None:
        if self._device is not None:
            self._device.close()


def target_name(info) -> str:
    return "the HTP simulator" if info.kind == "simulator" else f"device {info.serial}"


def worker_info() -> tuple[str, int]:
    return (os.environ.get("PYTEST_XDIST_WORKER", "master"),
            int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
