"""XNNPACK lifecycle bugs users have reported, driven on the host with no phone:

- orderings of two modules over convolutions (without bias: a null-pointer crash in the
  packed-weight cache's look-up was reported for it; with bias; depthwise), with no cache and
  with ONE cache path shared by every live module, every step checked against the reference
  (steps succeed, outputs match the CPU reference and each other);
- destroy / recreate cycles of a module with a file-backed cache (a cache file growing by
  hundreds of MB per cycle was reported): the cache file's size and the process's Rss and
  Anonymous memory growth per cycle, bounded by the config's `rss_leak_kb` per cycle;
- concurrent first loads (crashes when several XNNPACK modules initialise at once were
  reported) and executes on two threads (`parallel`), cold (first in the process) and warm;
- a second run of a module (segfaults on a second `execute` were reported): every scenario
  below executes each loaded method, and the cycles execute twice per module.
"""

from __future__ import annotations

import posixpath

import pytest

from harness.results.assertions import assert_outputs_consistent, assert_steps_ok, memory_growth_kb
from harness.drive.orderings import ModulePlan, explore, interleavings, scenario_jobs
from harness.scenario import Scenario
from harness.results.run import ScenarioResult
from harness.results.xnnpack import cache_log, cache_options
from harness.results.xnnpack_launches import SharedUse, shared_use
from harness.results.xnnpack_log import launch_reason

CONVS = "xnn_convs"
STACK = "xnn_linear_stack"  # 32 MiB of fp32 weights: growth per cycle is visible
PYTHON_RUNNER_SAMPLE = 4
CYCLES = 6


@pytest.fixture
def cache_dir(request, hil_session, hil_device) -> str:
    """A fresh scratch directory on the device for this test's cache files."""
    directory = posixpath.join(hil_device.scratch_dir(), "xnnlife-" + request.node.name[:60])
    for argv in (["rm", "-rf", directory], ["mkdir", "-p", directory]):
        code, out = hil_device.command(argv)
        assert code == 0, f"{argv}: {out}"
    return directory


class WatchedCache:
    """The scenario driver, seeing each launch's branch on a shared cache path (from the
    runtime's log) before a passing run is released: which launches used the file."""

    def __init__(self, driver, path: str) -> None:
        self.driver, self.path = driver, path
        self.launches: list[tuple[str, str, int | None]] = []

    def __getattr__(self, name: str):
        return getattr(self.driver, name)

    def _see(self, result: ScenarioResult) -> ScenarioResult:
        why = launch_reason(cache_log(result), self.path, True, "mapped")
        self.launches.append((result.scenario.name, why.branch, why.errno))
        return result

    def run(self, scenario: Scenario, *args, **kwargs) -> ScenarioResult:
        return self._see(self.driver.run(scenario, *args, **kwargs))

    def run_batch(self, scenarios, jobs: int = 1):
        for result in self.driver.run_batch(scenarios, jobs):
            yield self._see(result)

    def use(self, name: str) -> SharedUse:
        """The launches' use of the file, printed and in the report."""
        use = shared_use(name, self.path, self.launches)
        print(f"{name}: {use.text}")
        return use


def needs_options(hil_session, cached: bool) -> None:
    if cached and hil_session.device_runner == "python":
        pytest.skip("executorch 1.5.1 pybindings cannot pass backend options, so the Python "
                    "runner cannot set the XNNPACK cache; the native runner runs this")


def load_options(path: str | None) -> dict | None:
    """No cache: no backend options at all (the Python runner cannot pass any)."""
    return cache_options(path) if path else None


def options(path: str | None) -> tuple:
    return tuple((b, tuple(kv.items())) for b, kv in (load_options(path) or {}).items())


@pytest.mark.hil_cost(0.1, adb=0.2)
@pytest.mark.parametrize("cache", ["no_cache", "shared_cache"])
@pytest.mark.parametrize("method", ["conv_nobias", "conv_bias", "depthwise"])
def test_orderings_xnnpack_convolutions(compiled_model, scenario_driver, hil_session, hil_device,
                                        cache_dir, method, cache):
    """Every ordering (up to renaming) of two modules' load / load-method / execute / destroy
    over one convolution; with `shared_cache` both modules use one packed-weight cache file,
    which also persists from one ordering's process to the next. Orderings run at once share
    the path too, so a launch may find another holding the file (flock errno 11) and pack to
    heap: every launch's branch is reported (results.json xnnpack_launches), and the suite
    fails if no launch used the file at all (the shared-cache case was never exercised)."""
    needs_options(hil_session, cache == "shared_cache")
    path = posixpath.join(cache_dir, "convs.xnncache") if cache == "shared_cache" else None
    model = compiled_model(CONVS, "fp32")
    plans = [ModulePlan(m, model, (method,), backend_options=options(path)) for m in "AB"]
    orderings = list(interleavings(plans, symmetric=True))
    if hil_session.device_runner == "python":
        orderings = orderings[::max(1, len(orderings) // PYTHON_RUNNER_SAMPLE)]
    driver = WatchedCache(scenario_driver, path) if path else scenario_driver
    exploration = explore(driver, f"xconv_{method}_{cache}", plans, orderings,
                          jobs=scenario_jobs(hil_device))
    assert not exploration.failures, exploration.report()
    assert exploration.ran == len(orderings)
    if isinstance(driver, WatchedCache):
        use = driver.use(f"xconv_{method}_shared_cache")
        assert use.heap_launches < len(use.launches), use.text


def cycles_scenario(model, path: str | None, cycles: int, name: str) -> Scenario:
    """One process: `cycles` times create the module, execute twice, destroy it, snapshot."""
    sc = Scenario(name)
    if path:
        sc.watch_mappings.append(path)
    sc.snapshot()
    for _ in range(cycles):
        sc.load_module("A", model, backend_options=load_options(path))
        sc.execute("A", "forward").execute("A", "forward")
        sc.destroy_module("A").snapshot()
    return sc


@pytest.mark.parametrize("cache", ["no_cache", "file_cache"])
def test_destroy_recreate_cycles_do_not_grow(compiled_model, scenario_driver, hil_session,
                                             hil_device, cache_dir, cache):
    """Rss and Anonymous memory after each destroy stay within the config's rss_leak_kb per
    cycle of the first cycle's reading, and the cache file does not grow with the cycles."""
    needs_options(hil_session, cache == "file_cache")
    model = compiled_model(STACK, "fp32")
    path = posixpath.join(cache_dir, "stack.xnncache") if cache == "file_cache" else None
    driver = WatchedCache(scenario_driver, path) if path else scenario_driver
    result = driver.run(cycles_scenario(model, path, CYCLES, f"xcycles_{cache}"))
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    if isinstance(driver, WatchedCache):  # the cycles are one process: it used the file
        use = driver.use("xcycles_file_cache")
        assert use.heap_launches == 0, use.text
    snapshots = [i for i, s in enumerate(result.steps) if s.step.op == "snapshot"][1:]
    bound = hil_session.rss_leak_kb
    per_cycle = {}
    for field in ("Rss", "Anonymous"):
        growth = memory_growth_kb(result, snapshots[0], snapshots[-1], field)
        per_cycle[field] = growth / (len(snapshots) - 1)
        assert per_cycle[field] <= bound, (
            f"{field} grew {growth} kB over {len(snapshots) - 1} destroy/recreate cycles "
            f"({per_cycle[field]:.0f} kB per cycle, bound {bound} kB per cycle):\n{result.summary()}")
    if path:
        code, out = hil_device.command(["wc", "-c", path])
        size_after = int(out.split()[0]) if code == 0 else None
        one = scenario_driver.run(cycles_scenario(model, path + ".one", 1, "xcycles_one"))
        assert_steps_ok(one)
        code, out = hil_device.command(["wc", "-c", path + ".one"])
        size_one = int(out.split()[0]) if code == 0 else None
        assert size_after and size_one, f"no cache file written: {path} {size_after}, {size_one}"
        growth_kb = (size_after - size_one) / 1024 / (CYCLES - 1)
        print(f"cache file {size_one} bytes after 1 cycle, {size_after} after {CYCLES}: "
              f"{growth_kb:.1f} kB per cycle; Rss {per_cycle['Rss']:.0f} kB, Anonymous "
              f"{per_cycle['Anonymous']:.0f} kB per cycle")
        assert growth_kb <= bound, (f"the cache file grew {growth_kb:.0f} kB per destroy/recreate "
                                    f"cycle ({size_one} -> {size_after} bytes over {CYCLES} cycles)")


@pytest.mark.parametrize("cache", ["no_cache", "shared_cache"])
@pytest.mark.parametrize("warmth", ["cold", "warm"])
def test_parallel_loads_and_executes(compiled_model, scenario_driver, hil_session, cache_dir,
                                     warmth, cache):
    """Two modules of one XNNPACK program load their method on two threads at once, then
    execute at once; `warm`: a third module of the program was loaded and executed before."""
    needs_options(hil_session, cache == "shared_cache")
    if hil_session.device_runner == "python":
        pytest.skip("concurrent loads need the native runner: the executorch 1.5.1 pybindings "
                    "hold the GIL in load_method, so the Python runner cannot overlap them (and "
                    "its parallel XNNPACK loads did not finish within the runner timeout here)")
    model = compiled_model(STACK, "fp32")
    path = posixpath.join(cache_dir, "parallel.xnncache") if cache == "shared_cache" else None
    sc = Scenario(f"xparallel_{warmth}_{cache}")
    if warmth == "warm":
        sc.load_module("W", model, backend_options=load_options(path)).execute("W", "forward")
    for module in ("A", "B"):
        sc.load_module(module, model, backend_options=load_options(path))
    sc.parallel(("load_method", "A", "forward"), ("load_method", "B", "forward"))
    sc.parallel(("execute", "A", "forward"), ("execute", "B", "forward"))
    sc.execute("A", "forward").execute("B", "forward")
    sc.parallel(("destroy_module", "A"), ("destroy_module", "B"))
    if warmth == "warm":
        sc.destroy_module("W")
    driver = WatchedCache(scenario_driver, path) if path else scenario_driver
    result = driver.run(sc.snapshot())
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    if isinstance(driver, WatchedCache):  # one process: its modules share the file
        use = driver.use(f"xparallel_{warmth}_shared_cache")
        assert use.heap_launches == 0, use.text
