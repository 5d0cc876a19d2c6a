"""The host HTP simulator as a device: runners run as local child processes.

Each run gets its own QNN trace file and scenario file (under the test's artifacts, or for a
fork in its server's scratch directory until the driver keeps the run), and the QNN
environment of `harness.qnn.sdk` (interposer first on the library path).

Isolation (`--scenario-isolation`): with the native runner every scenario is, by default, a
fork of a server that has loaded the QNN libraries once (`harness.runner.fork_server`);
"process" starts the runner binary afresh for each scenario. Both start every scenario with
no backend, program or context; the fork skips loading the libraries again.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from harness import storage

from harness.qnn import dsp_heap
from harness.programs.compile import uses_qnn
from harness.output_limit import limit_bytes, notes_over, read_capped
from harness.protocol.wire import run_ended
from harness.config import load_soc, simulator_config, soc_config
from harness.devices.base import Device, DeviceInfo, Limits
from harness.devices.kinds import SIMULATOR, DeviceKind, OpenContext
from harness.errors import HarnessError
from harness.protocol.memory import ALLOCATOR_ENV
from harness.process import ProcessOutput, kill_by_environment, run_process
from harness.qnn.interposer_build import build_dlopen_shim
from harness.qnn.sdk import TRACE_ENV, QnnSdk
from harness.protocol.output import RunOutput
from harness.runner.fork_server import ForkServerPool
from harness.runner.launch import command_prefix as launch_prefix
from harness.runner.select import RunnerChoice
from harness.runner.valgrind import SLOWDOWN, XML_NAME, command_prefix
from harness.scenario import Scenario

ISOLATIONS = ("fork", "process")
# The harness process's own bookkeeping, not given to runners: pytest sets it anew for every
# test phase, so with it every test would need fork servers of its own.
HARNESS_ONLY_ENV = ("PYTEST_CURRENT_TEST",)


class SimulatorDevice(Device):
    def __init__(self, sdk: QnnSdk, soc: str, runner: RunnerChoice, abi_bridge: str = "auto",
                 isolation: str = "fork", jobs: int = 0, dsp_heap_setting: str = "auto",
                 device_config: Path | None = None, valgrind: str = "") -> None:
        if isolation not in ISOLATIONS:
            raise HarnessError(f"--scenario-isolation must be one of {', '.join(ISOLATIONS)}, "
                               f"not {isolation!r}")
        if jobs < 0:
            raise HarnessError(f"--scenario-jobs must be 1 or more (0: one per CPU), not {jobs}")
        self.sdk = sdk
        self.runner = runner
        self.runner_kind = runner.kind
        self.abi_bridge = abi_bridge
        self.scenario_jobs = jobs or os.cpu_count() or 1
        self.isolation_notice = ""
        if isolation == "fork" and runner.argv:
            self.isolation_notice = ("--scenario-isolation=fork needs the harness's own runner; "
                                     "a runner command starts a process per scenario")
            isolation = "process"
        if valgrind and isolation == "fork":
            # A fork of a server cannot start under valgrind: each scenario a new process.
            isolation = "process"
        self.isolation = isolation
        self.valgrind = valgrind  # the valgrind tool runners run under, "" for none
        # The simulator has no DSP: asked anyway (--dsp-heap on), the trace says it refused.
        self.dsp_heap = dsp_heap.wanted(dsp_heap_setting, android_htp=False)
        self.dsp_heap_note = dsp_heap.note(self.dsp_heap, android_htp=False, simulator=True)
        # preload set -> (the environment its servers started with, the pool)
        self._pools: dict[tuple, tuple[tuple, ForkServerPool]] = {}
        self._pools_lock = threading.Lock()
        self.info = DeviceInfo("simulator", "simulator", soc, platform.machine(),
                               details={"qnn": sdk.source})
        # The simulated SoC's config, or --device-config's file in its place.
        self.device_config = device_config
        self.soc_config = load_soc(device_config) if device_config else soc_config(soc)

    @property
    def title(self) -> str:
        return "the HTP simulator"

    @property
    def limits(self) -> Limits:
        """The simulator config's runner timeout, and its Rss tolerance unless --device-config
        gives one (the host's allocator is not a phone's); the rest from the SoC config."""
        sim = simulator_config()
        own = {"runner_timeout_s": sim.runner_timeout_s * (SLOWDOWN if self.valgrind else 1)}
        if self.device_config is None:
            own["rss_leak_kb"] = sim.rss_leak_kb
        return Limits.of(self.soc_config, **own)

    def replay_args(self) -> list[str]:
        return (["--simulator"] + (["--runner", "python"] if self.runner_kind == "python" else [])
                + (["--valgrind", self.valgrind] if self.valgrind else []))

    def read_state(self) -> dict:
        from harness.devices.state import SIMULATOR_REASON, unavailable

        return unavailable(SIMULATOR_REASON)

    def report_facts(self) -> dict:
        sim = simulator_config()
        return {"simulator_config": {"default_soc": sim.default_soc,
                                     "rss_leak_kb": sim.rss_leak_kb,
                                     "runner_timeout_s": sim.runner_timeout_s,
                                     "file": str(sim.path)}}

    def runner_description(self) -> str:
        how = "a fork of a pre-loaded runner" if self.isolation == "fork" else "a new process"
        under = f" under valgrind --tool={self.valgrind}" if self.valgrind else ""
        return f"{self.runner_kind}{under}; each scenario {how}; up to {self.scenario_jobs} at once"

    def scratch_dir(self) -> str:
        if not hasattr(self, "_scratch"):
            self._scratch = tempfile.TemporaryDirectory(prefix="executorch-hil-scratch-")
        return self._scratch.name

    def command(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout + proc.stderr

    def close(self) -> None:
        with self._pools_lock:
            pools, self._pools = list(self._pools.values()), {}
        for _, pool in pools:
            pool.close()
        if hasattr(self, "_scratch"):
            self._scratch.cleanup()

    def run(self, scenario: Scenario, artifacts: Path, timeout: float) -> RunOutput:
        """A new process writes its scenario file and QNN trace into `artifacts`; a fork
        writes them into its server's scratch directory in memory, and the driver writes them
        into `artifacts` with the rest when it keeps the run."""
        started = time.monotonic()
        valgrind_xml = ""
        base = {**os.environ, **ALLOCATOR_ENV, **self.sdk.environment(None, self.abi_bridge),
                **self.runner.environment(), dsp_heap.ENV: "1" if self.dsp_heap else "0",
                **scenario.run_env}
        if any(uses_qnn(model.backend) for model in scenario.models.values()):
            # The runtime's dlopen of each QNN library, traced and open to nemesis rules
            # (harness/qnn/interposer.c, HARNESS_DLOPEN_SHIM), first among the preloads.
            base["LD_PRELOAD"] = " ".join(p for p in (str(build_dlopen_shim()),
                                                      base.get("LD_PRELOAD", "")) if p)
        base.pop(TRACE_ENV, None)  # each run's own, set by _run; a server's environment lacks it
        for name in HARNESS_ONLY_ENV:
            base.pop(name, None)
        if self.isolation == "fork" and not scenario.own_process:
            qnn = any(uses_qnn(model.backend) for model in scenario.models.values())
            with self._pool(base, qnn).lease() as server:
                server_dir = server.scratch
                proc, trace = self._run(scenario, server.scratch, base, lambda path, env:
                                        server.run(path, env, timeout))
        else:
            artifacts.mkdir(parents=True, exist_ok=True)
            xml = artifacts / XML_NAME
            xml.unlink(missing_ok=True)
            prefix = (launch_prefix(scenario.launch) +
                      (command_prefix(self.valgrind, xml) if self.valgrind else []))
            proc, trace = self._run(scenario, artifacts, base, lambda path, env: run_process(
                prefix + self.runner.command(str(path)), env, timeout))
            if self.valgrind:
                proc.notes += [] if xml.is_file() else [f"valgrind wrote no report ({xml})"]
                valgrind_xml = xml.read_text(errors="replace") if xml.is_file() else ""
        self.log.debug("scenario %s: %s in %.3f s (%s)", scenario.name,
                       "timed out" if proc.timed_out else f"exit {proc.returncode}",
                       time.monotonic() - started, self.isolation)
        notes = list(proc.notes)
        if proc.returncode is None or proc.returncode < 0 or not run_ended(proc.stdout):
            forked = self.isolation == "fork" and not scenario.own_process
            full = storage.host_full_note(server_dir if forked else artifacts)
            notes += [full] if full else []
        return RunOutput(proc.returncode, proc.stdout, proc.stderr, trace, proc.timed_out,
                         self.runner_kind, notes=notes, valgrind_xml=valgrind_xml)

    def _run(self, scenario: Scenario, directory: Path, base: dict[str, str],
             start) -> tuple[ProcessOutput, str]:
        """Write the scenario file into `directory`, start it with `base` and the trace file
        there as the environment, and return what ran and the trace's text."""
        trace = directory / "qnn_trace.txt"
        trace.unlink(missing_ok=True)
        scenario_file = scenario.write(directory / "scenario.json",
                                       lambda p: str(Path(p).absolute()))
        proc = start(scenario_file.absolute(), {**base, TRACE_ENV: str(trace)})
        if proc.timed_out:  # what left the runner's process group (setsid) goes too
            escaped = kill_by_environment(TRACE_ENV, str(trace))
            if escaped:
                self.log.warning("killed %d process(es) of the timed-out run %s outside its "
                                 "process group: pid %s", len(escaped), scenario.name,
                                 ", ".join(map(str, escaped)))
        limit = limit_bytes()
        text, size = read_capped(trace, limit)
        proc.notes += notes_over({"the QNN trace": size}, limit)
        return proc, text

    def _pool(self, base: dict[str, str], qnn: bool) -> ForkServerPool:
        """The fork servers for this environment: a server starts with a scenario's environment
        less its per-run part (the trace file; the interposer reads it at every call), since
        the loader and malloc read theirs only at start.

        Servers for scenarios with QNN programs have the QNN libraries loaded (the interposer
        by the name the runtime asks for, the real library by the path the interposer opens);
        the others load nothing more, since a fork copies every mapping its server holds and
        a scenario without QNN would pay for 100 MB of QNN mappings it never touches."""
        preload = (("libQnnHtp.so", base["HARNESS_QNN_REAL_HTP"], "libQnnSystem.so") if qnn
                   else ())
        environment = tuple(sorted(base.items()))
        with self._pools_lock:
            held = self._pools.get(preload)
            if held is not None and held[0] == environment:
                return held[1]
            # The environment changed (a test set a variable): servers for the new one, and
            # the old ones stopped, so the device holds at most one pool per preload set.
            pool = ForkServerPool(self.runner.fork_server_command(), list(preload), base,
                                  self.scenario_jobs,
                                  self.log)
            self._pools[preload] = (environment, pool)
        if held is not None:
            held[1].close()
        return pool


class SimulatorKind(DeviceKind):
    """The host's HTP simulator: the session's target without --device (or with --simulator).
    It simulates `--soc` (default: device_configs/simulator.yaml's), known before it opens."""

    name = "simulator"
    title = "HTP simulator"

    @classmethod
    def claims(cls, target: str) -> bool:
        return target == SIMULATOR

    @classmethod
    def describe(cls, target: str) -> str:
        return cls.title

    @classmethod
    def add_options(cls, group) -> None:
        group.addoption("--simulator", action="store_true",
                        help="run on the host HTP simulator (the default when no --device is "
                             "given)")
        group.addoption("--scenario-jobs", type=_scenario_jobs, default=0, metavar="N",
                        help="simulator: run up to N independent scenarios at once where a "
                             "test has several (the ordering explorer); default: one per CPU")

    @classmethod
    def known_soc(cls, options) -> str:
        return options.soc or simulator_config().default_soc

    @classmethod
    def check_start_up(cls, targets: list[str], context: OpenContext) -> None:
        soc_config(cls.known_soc(context.options))
        if context.options.valgrind:
            _valgrind_runner(context)  # a usage error now, not an error of every test

    @classmethod
    def open(cls, target: str, context: OpenContext) -> SimulatorDevice:
        opts = context.options
        runner = _valgrind_runner(context)
        device = SimulatorDevice(context.sdk(), cls.known_soc(opts), runner,
                                 opts.abi_bridge, isolation=opts.scenario_isolation,
                                 jobs=opts.scenario_jobs, dsp_heap_setting=opts.dsp_heap,
                                 device_config=opts.device_config, valgrind=opts.valgrind)
        if device.isolation_notice:
            context.notice(device.isolation_notice)
        return device


def _scenario_jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = -1
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"--scenario-jobs takes a whole number of 1 or more, "
                                         f"not {value!r}")
    return jobs


def _valgrind_runner(context: OpenContext) -> RunnerChoice:
    """The session's simulator runner; under --valgrind it must be the native one (the Python
    runner under valgrind reports the interpreter's own memory use)."""
    runner = context.simulator_runner()
    opts = context.options
    if opts.valgrind and runner.kind != "native":
        raise HarnessError(f"--valgrind={opts.valgrind} runs the native runner, which cannot be "
                           f"used here ({runner.notice or 'the Python runner was chosen'})")
    return runner
