"""Per-session state of the plugin: options, the device, the runner, configs, compiled models.

Created lazily, so a run that collects no HIL test (the framework's own tests) never builds a
runner or touches the QNN libraries.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harness.programs.compile import CompiledModel, compile_model
from harness.config import SocConfig
from harness.config.options import Options
from harness.devices.base import Device
from harness.devices.kinds import OpenContext, kind_for, uses_farm, worker_target
from harness.log import NoticeCollector, interrupts_deferred, notice
from harness.errors import ConfigError, HarnessError, ModelError
from harness.programs.models import get_model
from harness.qnn.pairing import Pairing, session_pairing
from harness.qnn.sdk import QnnSdk, discover
from harness.runtime import executorch_version
from harness.runner.select import RunnerChoice, choose_runner
from harness.programs.user import check_soc

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import pytest

    from harness.devices.farm import Lease
    from harness.devices.farm_failover import FarmFailover


class HilSession:
    def __init__(self, options: Options, config: pytest.Config | None = None) -> None:
        self.options = options
        self.config = config  # for the device kinds' own options
        self._device: Device | None = None
        self._device_error: HarnessError | None = None
        self._sdk: QnnSdk | None = None
        self._simulator_runner: RunnerChoice | None = None
        self._models: dict[tuple[str, str, str, str], CompiledModel] = {}
        self._programs: dict[Path, CompiledModel] = {}
        self._program_errors: dict[Path, ModelError] = {}
        # Notices go through the `harness` logger (harness.log); this session's are gathered
        # for the header and summary.
        self._notices = NoticeCollector(self).attach()
        self._farm: FarmFailover | None = None  # on a labgrid farm
        self._closed = False
        self.farm_tests: dict[str, list[str]] = {}  # device label -> "nodeid outcome", in order

    @property
    def notices(self) -> list[str]:
        """This session's notices so far, in order (header and summary lines)."""
        return self._notices.lines

    @property
    def keyed_notices(self) -> dict[str, str]:
        """This session's notices by what makes two of them one (their text, or for a full
        disk its filesystem): what an xdist worker hands the controller to print once."""
        return dict(self._notices.keyed)

    def add_notices(self, keyed: dict[str, str]) -> None:
        """Keep notices another process said (an xdist worker's, a farm's events), each once."""
        for key, text in keyed.items():
            self._notices.add(text, key)

    def notice(self, text: str, key: str | None = None) -> None:
        """Say `text` in the log and in the session's header and summary; `key` makes
        notices of other texts one (an xdist worker's own count of the same finding)."""
        notice(_log, text, self, key)

    # Pieces --------------------------------------------------------------------------------
    @property
    def sdk(self) -> QnnSdk:
        if self._sdk is None:
            self._sdk = discover()
        return self._sdk

    @property
    def qairt(self) -> str | None:
        """The QAIRT version of the QNN libraries (for known issues keyed by it); None when
        there are none or it cannot be told."""
        from harness.runtime import qairt_version

        try:
            return qairt_version(self.sdk)
        except HarnessError:
            return None

    @property
    def pairing(self) -> Pairing:
        """The SDK pairing of this session (harness.qnn.pairing): the runtime's QAIRT headers
        against the QNN libraries', and the ABI bridge setting."""
        try:
            libraries = self.sdk.source
        except HarnessError as exc:
            libraries = f"unavailable ({exc})"
        return session_pairing(self.qairt, libraries, self.options.abi_bridge)

    @property
    def simulator_runner(self) -> RunnerChoice:
        """The runner of the simulator device, from --runner: the native one unless Python was
        asked for or no native build is possible here (then a notice says why). An adb
        device's runner is its ABI's build (`harness.runner.select.device_build`)."""
        if self._simulator_runner is None:
            choice = choose_runner(self.options.runner)
            if choice.notice:
                self.notice(choice.notice)
            self._simulator_runner = choice
        return self._simulator_runner

    @property
    def uses_farm(self) -> bool:
        """Devices come from labgrid places (--lg-place-tags), not from --device/--farm."""
        return uses_farm(self.options)

    @property
    def target(self) -> str:
        """This worker's target (`harness.devices.kinds`): worker N of an xdist run takes the
        Nth --device, `SIMULATOR` without one; on a labgrid farm, the phone of the place it
        holds (reserved on first use)."""
        if self.uses_farm:
            return self.device.info.serial
        return worker_target(self.options)

    def open_context(self, place: Lease | None = None) -> OpenContext:
        """What a device kind opens a device with (harness.devices.kinds.OpenContext)."""
        return OpenContext(self.options, self.notice, lambda: self.sdk,
                           lambda: self.simulator_runner, self.config, place)

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
            self._device.log.info("ready: %s; runner %s", self._device.info.header(),
                                  self._device.runner_description())
        return self._device

    def _make_device(self) -> Device:
        """The worker's target opened by its kind. Nothing here reads the half-built session:
        a kind gets what it needs as arguments (`open_context`)."""
        if self.uses_farm:
            return self._farm_worker().lease_device()
        target = self.target
        return kind_for(target).open(target, self.open_context())

    # Labgrid farm: the worker's places (harness.devices.farm_failover) ---------------------
    def _farm_worker(self) -> FarmFailover:
        if self._farm is None:
            from harness.devices.farm_failover import FarmFailover  # labgrid sessions only

            coordinator = self.options.lg_coordinator
            if not coordinator:  # the options refuse place tags without one; said here again
                raise ConfigError("--lg-place-tags needs a labgrid coordinator: --lg-coordinator "
                                  "HOST:PORT or LG_COORDINATOR")
            self._farm = FarmFailover(coordinator, self.options.lg_place_tags,
                                      self.options.worker, self.notice, self.open_context)
        return self._farm

    def fail_over(self) -> None:
        """On a labgrid farm, before a test: a phone that dropped off for good is replaced by
        another place's (harness.devices.farm_failover); models compiled for another SoC go."""
        if self._farm is None:
            return  # not a labgrid farm session: its devices never come from places
        from harness.devices.farm_device import FarmDevice

        if isinstance(self._device, FarmDevice) and self._farm_worker().fail_over(self._device):
            self._models.clear()
            self._programs.clear()
            self._program_errors.clear()

    @property
    def farm_label(self) -> str | None:
        """The place and serial tests run on now, on a labgrid farm."""
        if self._farm is None:
            return None
        from harness.devices.farm_device import FarmDevice

        device = self._device if isinstance(self._device, FarmDevice) else None
        return self._farm.label(device)

    def new_farm_events(self) -> list[str]:
        """What happened to places since the last call (for the controller's summary)."""
        return self._farm.new_events() if self._farm is not None else []

    def record_test(self, label: str, nodeid: str, outcome: str) -> None:
        """That test `nodeid` ran on the place `label` (for the summary: tests per place)."""
        self.farm_tests.setdefault(label, []).append(f"{nodeid} {outcome}")

    @property
    def soc(self) -> str:
        """The SoC scenarios are compiled for: the device's resolved one, or the one its kind
        knows before the device opens (the simulated SoC)."""
        if self._device is None and not self.uses_farm:
            known = kind_for(self.target).known_soc(self.options)
            if known is not None:
                return known
        return self.device.info.soc

    @property
    def soc_config(self) -> SocConfig:
        """The resolved config of the session's device (building the device if needed)."""
        return self.device.soc_config

    @property
    def device_runner(self) -> str:
        """The runner scenarios really run in ("native" or "python"): the device's own."""
        return self.device.runner_kind

    @property
    def timeout(self) -> float:
        """--runner-timeout, else the device's limit (harness.devices.base.Limits)."""
        if self.options.runner_timeout:
            return self.options.runner_timeout
        return self.device.limits.runner_timeout_s

    @property
    def soak_bounds(self) -> tuple[float, float]:
        """(Rss kB, malloc bytes) of growth per soak cycle the device's SoC config tolerates:
        the arguments of assertions.assert_soak_bounded after the fit."""
        limits = self.device.limits
        return limits.soak_rss_kb_per_cycle, limits.soak_heap_bytes_per_cycle

    @property
    def rss_leak_kb(self) -> int:
        """Rss growth tolerated over a reload cycle: the device's limit."""
        return self.device.limits.rss_leak_kb

    @property
    def dsp_heap(self) -> tuple[int, int, bool]:
        """(allowed kB per live context, kB allowed above the baseline with none live, whether
        the device gives the reading): the arguments of assertions.assert_dsp_heap_bounded."""
        limits = self.device.limits
        return limits.dsp_heap_context_kb, limits.dsp_heap_leak_kb, self.device.dsp_heap

    @property
    def htp_context_kb(self) -> int:
        """dma-buf (HTP shared / spill-fill) memory allowed per live QNN context; the device's
        limit (the simulated SoC's value on the simulator, which allocates none)."""
        return self.device.limits.htp_context_kb

    def model(self, name: str, precision: str = "fp16",
              options: dict | None = None, soc: str | None = None) -> CompiledModel:
        """The registry model `name` compiled for this session's SoC (or `soc`: a program built
        for another SoC, as an app may carry); `options` are QNN compile options
        (harness.programs.compile.COMPILE_OPTIONS), e.g. {"multi_contexts": True}."""
        import json

        from harness.programs.compile import normalize_options

        normalized = normalize_options(options)
        soc = soc or self.soc
        key = (name, precision, json.dumps(normalized, sort_keys=True), soc)
        if key not in self._models:
            spec = get_model(name, extra_dirs=tuple(self.options.models_dirs))
            self._models[key] = compile_model(spec, soc, precision, self.sdk,
                                              self.options.artifacts_dir / "compile-logs",
                                              options=normalized, notice=self.notice)
        return self._models[key]

    def program(self, path: Path) -> CompiledModel:
        """A user's own `.pte` (harness.programs.user): read, checked against the device's SoC,
        given inputs, and its reference taken from a solo run on this session's device."""
        from harness.drive.driver import ScenarioDriver
        from harness.results.failures import run_failures
        from harness.programs.etrecord import describe as etrecord_describe
        from harness.programs.etrecord import etrecord_for, etrecord_references
        from harness.programs.pte_reader import read_program
        from harness.drive.llm_loop import with_decode_loop
        from harness.drive.solo import (HEAP_FILLS, judged_against_meaning, perturbed,
                                        solo_failure_text, solo_scenario, start_words,
                                        uninitialised_reads, unusable_words, with_reference,
                                        with_undefined, with_uninitialised)
        from harness.programs.user import constant_references, meaning_tolerance, program_model

        path = Path(path).resolve()
        if path in self._program_errors:
            raise self._program_errors[path]  # its solo run failed once: not again per test
        if path not in self._programs:
            info = read_program(path)
            device = self.device
            check_soc(info, device.info.soc, device.title)
            # Per worker: the xdist workers of one session share its artifacts directory, and
            # each makes its own inputs and solo-run reference (a runner of one worker read
            # the other's reference while it was being written: "has 0 bytes").
            work = (self.options.artifacts_dir / "programs" / self.options.worker
                    / f"{path.stem}-{info.sha256[:12]}")
            model = program_model(info, device.info.soc, work)
            record = etrecord_for(path, self.options.etrecords)
            if record is not None:
                # The program's meaning is known: the solo run is judged against it first.
                try:
                    # A constant method (a metadata method) has no edge program: its
                    # reference is the value the program serializes.
                    refs = etrecord_references(
                        record, {m: ref.input_sequence or (ref.inputs,)
                                 for m, ref in model.methods.items()
                                 if m not in info.constants}, work / "etrecord")
                    refs.update(constant_references(info, work / "constants"))
                except ModelError as exc:
                    self._program_errors[path] = exc  # once, not again per test
                    raise
                atol, rtol = meaning_tolerance(info)
                model = dataclasses.replace(model, methods=refs, atol=atol, rtol=rtol,
                                            reference=etrecord_describe(record))
            driver = ScenarioDriver(device, work / "solo", self.timeout)
            # Twice, the heap filled differently: what differs is uninitialised memory.
            runs = [driver.run(perturbed(solo_scenario(model), fill), allow_crash=True)
                    for fill in HEAP_FILLS]
            failures = [f for run in runs for f in run_failures(run) if f.kind != "mismatch"]
            if failures:
                error = ModelError(solo_failure_text(info, failures[0], work / "solo"))
                self._program_errors[path] = error
                raise error
            reads = uninitialised_reads(model, *runs)
            if record is None:
                # The solo run is the reference: where it read uninitialised memory, none.
                unusable = unusable_words(info, reads)
                model = with_undefined(with_reference(model, runs[0], work / "reference"),
                                       unusable)
                notes: list[str] = []
            else:
                # The ETRecord stays the reference; the runtime's outputs are undefined there.
                unusable = unusable_words(info, reads, f"each execute is judged against "
                                                       f"{model.reference}")
                model, notes = judged_against_meaning(model, runs[0], info, work / "reference")
                model = with_uninitialised(model, unusable, reads)
            # Once a session, whichever worker says it first (each made its own solo runs).
            said = [(text, f"program {info.sha256} unusable {method}")
                    for method, text in unusable.items()]
            said += [(text, f"program {info.sha256} meaning {n}") for n, text in enumerate(notes)]
            if start_words(info):
                said.append((start_words(info), f"program {info.sha256} undefined start"))
            for text, key in said:
                self.notice(text, key)
            # An LLM export's decode loop, its reference from its own solo run.
            self._programs[path] = with_decode_loop(
                model, info, ScenarioDriver(device, work / "loop", self.timeout),
                work / "decode_loop")
        return self._programs[path]

    def runtime_line(self) -> str:
        """The runtime under test and the QNN libraries, for the session header."""
        from harness.runtime import current

        try:
            qnn = self.sdk.source
        except HarnessError as exc:
            return f"{current().describe()}; QNN libraries unavailable ({exc})"
        from harness.runtime.variants import describe, session_variant

        qairt = self.qairt
        variant = session_variant()
        return (f"{current().describe()}; QNN {qnn}" + (f" (QAIRT {qairt})" if qairt else "")
                + ("" if variant == "none" else f"; runtime variant {describe(variant)}"))

    def header(self) -> list[str]:
        lines = [f"executorch {executorch_version()}; runner requested: {self.options.runner}",
                 f"runtime: {self.runtime_line()}", f"SDK pairing: {self.pairing.describe()}"]
        try:
            lines.append(f"device: {self.device.info.header()}")
            lines.append(f"runner: {self.device.runner_description()}")
        except HarnessError as exc:
            lines.append(f"device unavailable: {exc}")
        lines += [f"notice: {n}" for n in self.notices]
        return lines

    def summary(self) -> list[str]:
        lines = self._device.summary() if self._device is not None else []
        if self._device is not None and self._device.dsp_heap_note:
            lines.append(self._device.dsp_heap_note)  # e.g. that the simulator has none
        lines += self._farm.summary() if self._farm is not None else []
        return lines + [f"farm: tests on {label}: {', '.join(tests)}"
                        for label, tests in self.farm_tests.items()]

    def close(self) -> None:
        """End the session's use of its device and farm: runners killed, workspace removed,
        lease released, reservations cancelled, to the end even through a second Ctrl-C.
        A second close does nothing (`--mutate` ends the session's use of the device before its
        mutant passes take it, and unconfigure closes again)."""
        with interrupts_deferred("killing runners, removing the workspace, releasing the "
                                 "device lease and the farm's reservations"):
            if self._closed:
                return
            self._closed = True
            try:
                if self._device is not None:
                    self._device.close()
            finally:
                try:
                    if self._farm is not None:
                        self._farm.close()  # releases the place, cancels the reservations
                finally:
                    self._notices.detach()


def worker_info() -> tuple[str, int]:
    return (os.environ.get("PYTEST_XDIST_WORKER", "master"),
            int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
