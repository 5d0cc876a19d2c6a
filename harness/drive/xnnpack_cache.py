"""The XNNPACK packed-weight cache suites' launches: one program (`xnn_linear_stack`, 32 MiB of
fp32 weights in 8 packs) launched in fresh runner processes on a cache path of the device, each
launch's placement classified from measured memory and a cache's story judged over launches
(harness.results.xnnpack, xnnpack_launches).

Shared by tests/hil/test_xnnpack_cache.py and test_xnnpack_branches.py; here, not in a test
module, so the suites shipped in the wheel (harness._data.tests.hil) import it as the checkout's do.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import shlex
import struct
from typing import Any

from harness.devices.base import Device
from harness.drive.driver import ScenarioDriver
from harness.programs.compile import CompiledModel
from harness.programs.compile_worker import load_model_module
from harness.programs.models import get_model
from harness.results.assertions import assert_outputs_consistent
from harness.results.xnnpack import (CacheLoad, add_counter_probes, assert_cache_steps_ok,
                                     assert_counters_agree, cache_options, classify_load,
                                     classify_span, note_counters, read_counters)
from harness.results.xnnpack_launches import CacheStory, FileState, Launch, judge
from harness.results.run import ScenarioResult
from harness.runner import launch as wrapper
from harness.runtime import executorch_version
from harness.scenario import Scenario

MODEL = "xnn_linear_stack"
PRECISION = "fp32"
PACKS = 8  # packed entries of `forward` (8 Linear layers, weight and bias one entry each)
LAUNCHES = 3  # launches a cache's story is judged over
FOOTER = 20  # [index_start:u64][entry_count:u32][magic:u32][version:u32] at the file's end
PYTHON_RUNNER_SKIP = ("executorch 1.5.1 pybindings cannot pass backend options (no "
                      "LoadBackendOptionsMap), so the Python runner cannot set the XNNPACK cache")


@dataclasses.dataclass
class Cache:
    """One test's model, scratch directory on the device and launch helpers."""

    model: CompiledModel
    weights: dict[str, int]  # method -> unpacked weight bytes
    device: Device
    driver: ScenarioDriver
    dir: str
    launches: int = 0

    def path(self, name: str) -> str:
        return posixpath.join(self.dir, name)

    def sh(self, *argv: str) -> str:
        code, out = self.device.command(list(argv))
        if code != 0:
            raise AssertionError(f"device command {' '.join(argv)} failed ({code}): {out}")
        return str(out)

    def size(self, path: str) -> int | None:
        code, out = self.device.command(["wc", "-c", path])
        return int(out.split()[0]) if code == 0 and out.split() else None

    def state(self, path: str | None) -> FileState:
        """The cache file's size and digest (cksum: in toybox and coreutils alike)."""
        if path is None:
            return FileState(None)
        code, out = self.device.command(["cksum", path])
        parts = out.split()
        return FileState(int(parts[1]), parts[0]) if code == 0 and len(parts) >= 2 \
            else FileState(None)

    def story(self, tag: str, cache: str | None, n: int = LAUNCHES, method: str = "forward",
              packs: int | None = PACKS, expect: str | tuple[str, ...] | None = None,
              **launch: Any) -> CacheStory:
        """`n` launches of one program on one cache path, judged together (printed, and in
        the report). `expect`: the placement the test expects of every launch, or of each
        ("mapped", "fallback"), for the report (the test asserts it itself)."""
        expected = (expect,) * n if expect is None or isinstance(expect, str) else expect
        launches = []
        for i in range(n):
            before = self.state(cache)
            result = self.launch(f"{tag}{i + 1}", cache, (("A", method),), **launch)
            load = classify_load(result, self.weights[method], expected=expected[i])
            launches.append(Launch(load, before, self.state(cache)))
            self.record(result, load)
        story = judge(tag, launches, packs)
        print(f"{tag}: {story.text}")
        return story

    def read(self, path: str, offset: int, count: int) -> bytes:
        """Bytes of a file on the device (od: in toybox and coreutils alike)."""
        out = self.sh("od", "-An", "-v", "-tx1", "-j", str(offset), "-N", str(count), path)
        return bytes.fromhex("".join(out.split()))

    def write(self, path: str, offset: int, data: bytes) -> None:
        """Overwrite bytes of a file on the device in place."""
        octal = "".join(f"\\{b:03o}" for b in data)
        self.sh("sh", "-c", f"printf '{octal}' | dd of={shlex.quote(path)} bs=1 "
                f"seek={offset} conv=notrunc 2>/dev/null")

    def index(self, path: str) -> tuple[int, int, list[tuple[str, int]]]:
        """The cache file's trailer: (index_start, entry_count, [(name, seed offset)])."""
        size = self.size(path)
        if not size or size <= FOOTER:
            raise AssertionError(f"{path}: {size} bytes, no trailer")
        start, count = struct.unpack("<QI", self.read(path, size - FOOTER, 12))
        raw = self.read(path, start, size - FOOTER - start)
        entries, at = [], 0
        for _ in range(count):
            (length,) = struct.unpack_from("<I", raw, at)
            name = raw[at + 4:at + 4 + length].decode("latin-1")
            at += 4 + length + 16  # name, then [file_offset:u64][data_size:u64]
            entries.append((name, start + at))  # the entry's [seed:u32]
            at += 4
        return start, count, entries

    def launch(self, tag: str, cache: str | None,
               modules: tuple[tuple[str, str], ...] = (("A", "forward"),),
               load_mode: str | None = None, allow_crash: bool = False,
               under: tuple[wrapper.Launch, ...] = ()) -> ScenarioResult:
        """Run one launch; check it completed with correct outputs. `allow_crash`: a run that
        did not complete is returned for the caller to judge; `under`: the wrappers the runner
        starts under, its cause (Scenario.launch: libfiu's fiu-run, setpriv), recorded with
        the run so that replay and the exports start it so again."""
        self.launches += 1
        sc = Scenario(f"x1_{self.launches}_{tag}")
        sc.launch = list(under)
        if cache:
            sc.watch_mappings.append(cache)
        sc.snapshot()
        for module, method in modules:
            sc.load_module(module, self.model, backend_options=cache_options(cache),
                           load_mode=load_mode)
            sc.execute(module, method)
        add_counter_probes(sc)
        for module, method in modules:
            sc.execute(module, method)
        for module, _ in modules:
            sc.destroy_module(module)
        sc.snapshot()
        result = self.driver.run(sc, allow_crash=allow_crash)
        if allow_crash and not result.completed:
            return result
        assert_cache_steps_ok(result)  # no crash, every execute matches the CPU reference
        assert_outputs_consistent(result)
        self._counters(result, cache, modules)
        return result

    def _counters(self, result: ScenarioResult, cache: str | None,
                  modules: tuple[tuple[str, str], ...]) -> None:
        """Compare the runtime's own counters (where published) with the whole launch's
        measurement; note once per session when the runtime publishes none."""
        counters = read_counters(result)
        note_counters(counters, executorch_version(), result.artifacts)
        if counters.exposed:
            probes = [i for i, s in enumerate(result.steps) if s.step.op == "get_option"]
            weights = sum({self.weights[m] for _, m in modules})
            assert_counters_agree(counters, classify_span(result, weights, 0, probes[0] - 1, cache),
                                  file_bytes=self.size(cache) if cache else None)

    def record(self, result: ScenarioResult, *loads: CacheLoad) -> None:
        for load in loads:
            print(load.describe())
        if result.artifacts is not None:
            (result.artifacts / "xnnpack_loads.json").write_text(
                json.dumps([l.to_json() for l in loads], indent=1))


def new_cache(device: Device, driver: ScenarioDriver, model: CompiledModel, name: str) -> Cache:
    """A test's Cache: its compiled `model`, and an empty scratch directory on `device` named
    after the test (`name`)."""
    weights = dict(load_model_module(get_model(MODEL).path).WEIGHT_BYTES)
    directory = posixpath.join(device.scratch_dir(), "xnn-" + name[:60])
    cache = Cache(model, weights, device, driver, directory)
    cache.sh("rm", "-rf", directory)
    cache.sh("mkdir", "-p", directory)
    return cache
