"""The native runner's builds (harness.runner.builds) and the built runner itself.

(a) Android command lines and the nlohmann/json headers of every build, (b) clear errors for
a missing NDK/prefix, (c) a real host build, cached and safe under concurrent callers, (d) the
built runner on the HTP simulator (laid out by harness.qnn.sdk), its exit code 2 paths and
its event format, (e) XNNPACK backend options reaching the runtime (the packed-weight cache
file gets mapped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.runner.builds import RunnerBuildError
from harness.runner.builds.android import android_build_commands, build_android_runner
from harness.runner.builds.arm64_linux import arm64_linux_build_commands
from harness.runner.builds.cli import main as build_runner
from harness.runner.builds.host import (
    build_host_runner,
    host_build_commands,
    host_build_key,
    host_runner_available,
)
from harness.runner.builds.inputs import (
    default_cache_root,
    executorch_package_dir,
    runner_source_dir,
)
from harness.runner.builds.tools import nlohmann_json_include_dir, nlohmann_json_problem

EVENT = "HARNESS_EVENT "


# ------------------------------------------------------------------------- (a)


def test_android_commands_carry_toolchain_abi_platform_and_prefix(tmp_path):
    ndk, prefix = tmp_path / "ndk", tmp_path / "et-android"
    configure, build = android_build_commands(tmp_path / "b", ndk, prefix, platform=31)
    assert f"-DCMAKE_TOOLCHAIN_FILE={ndk}/build/cmake/android.toolchain.cmake" in configure
    assert "-DANDROID_ABI=arm64-v8a" in configure
    assert "-DANDROID_PLATFORM=android-31" in configure
    assert f"-DCMAKE_PREFIX_PATH={prefix}" in configure
    assert configure[configure.index("-G"):configure.index("-G") + 2] == ["-G", "Ninja"]
    assert configure[configure.index("-S") + 1] == str(runner_source_dir())
    assert build[1:3] == ["--build", str(tmp_path / "b")]


def test_android_commands_default_platform_and_custom_source(tmp_path):
    configure, _ = android_build_commands(
        tmp_path / "b", tmp_path / "ndk", tmp_path / "p", source_dir=tmp_path / "src")
    assert "-DANDROID_PLATFORM=android-30" in configure
    assert configure[configure.index("-S") + 1] == str(tmp_path / "src")


def test_host_commands_use_pypi_cmake_ninja_and_the_wheel(tmp_path):
    configure, build = host_build_commands(tmp_path / "b")
    assert "-DCMAKE_BUILD_TYPE=Release" in configure
    assert configure[configure.index("-G"):configure.index("-G") + 2] == ["-G", "Ninja"]
    pkg = executorch_package_dir()
    if pkg is not None:
        assert f"-DCMAKE_PREFIX_PATH={pkg}" in configure
    if (Path(sys.executable).parent / "cmake").exists():
        assert configure[0] == str(Path(sys.executable).parent / "cmake")
    assert build[0] == configure[0]


def test_cli_prints_android_commands_without_an_ndk(capsys):
    assert build_runner(["--android", "--print-commands", "--platform", "33"]) == 0
    out = capsys.readouterr().out
    assert "-DANDROID_ABI=arm64-v8a" in out and "-DANDROID_PLATFORM=android-33" in out
    assert "android.toolchain.cmake" in out


# ------------------------------------------------------------------------- (b)


def test_missing_ndk_names_what_to_pass(tmp_path):
    with pytest.raises(RunnerBuildError, match="--ndk"):
        build_android_runner(tmp_path / "b", tmp_path / "no-ndk", tmp_path)


def test_missing_prefix_names_what_to_pass(tmp_path):
    ndk = tmp_path / "ndk"
    (ndk / "build" / "cmake").mkdir(parents=True)
    (ndk / "build" / "cmake" / "android.toolchain.cmake").write_text("")
    with pytest.raises(RunnerBuildError, match="--executorch-prefix"):
        build_android_runner(tmp_path / "b", ndk, tmp_path / "no-prefix")
    empty = tmp_path / "empty-prefix"
    empty.mkdir()
    with pytest.raises(RunnerBuildError, match="--executorch-prefix"):
        build_android_runner(tmp_path / "b", ndk, empty)


def test_cli_android_without_ndk_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ANDROID_NDK", raising=False)
    assert build_runner(["--android", "--executorch-prefix", str(tmp_path)]) == 2
    assert "--ndk" in capsys.readouterr().err
    assert build_runner(["--android", "--ndk", str(tmp_path / "nope"),
                        "--executorch-prefix", str(tmp_path)]) == 1
    assert "--ndk" in capsys.readouterr().err


def test_every_build_gets_the_nlohmann_json_headers(monkeypatch, tmp_path):
    include = tmp_path / "include"
    (include / "nlohmann").mkdir(parents=True)
    (include / "nlohmann" / "json.hpp").write_text("")
    monkeypatch.setattr("harness.runner.builds.tools.NLOHMANN_JSON_DIRS",
                        (tmp_path / "none", include))
    assert nlohmann_json_include_dir() == include
    assert nlohmann_json_problem() == ""
    flag = f"-DHARNESS_NLOHMANN_JSON_INCLUDE_DIR={include}"
    for configure, _ in (
        host_build_commands(tmp_path / "b"),
        arm64_linux_build_commands(tmp_path / "b", tmp_path / "tc", tmp_path / "et"),
        android_build_commands(tmp_path / "b", tmp_path / "ndk", tmp_path / "p"),
    ):
        assert flag in configure

    monkeypatch.setattr("harness.runner.builds.tools.NLOHMANN_JSON_DIRS", (tmp_path / "none",))
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "none"))
    assert nlohmann_json_include_dir() is None
    assert "apt-get install nlohmann-json3-dev" in nlohmann_json_problem()


def test_cache_root_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path))
    assert default_cache_root() == tmp_path / "runner"
    monkeypatch.delenv("EXECUTORCH_HIL_CACHE")
    assert default_cache_root() == Path.home() / ".cache" / "executorch-hil" / "runner"


def test_build_key_follows_the_sources(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.cpp").write_text("int main() { return 0; }\n")
    first = host_build_key(src)
    assert host_build_key(src) == first
    (src / "main.cpp").write_text("int main() { return 1; }\n")
    assert host_build_key(src) != first


def test_unavailable_host_build_raises_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr("harness.runner.builds.host.host_runner_available",
                        lambda: (False, "ninja not found: pip install ninja"))
    with pytest.raises(RunnerBuildError, match="pip install ninja"):
        build_host_runner(tmp_path, force=True)


# ------------------------------------------------------------------------- (c)


@pytest.fixture(scope="session")
def host_build(tmp_path_factory):
    """A real cold host build into a fresh cache, by three concurrent callers."""
    ok, why = host_runner_available()
    if not ok:
        pytest.skip(f"host build impossible here: {why}")
    cache = tmp_path_factory.mktemp("runner-cache")
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:
        paths = list(pool.map(lambda _: build_host_runner(cache), range(3)))
    return cache, paths, time.monotonic() - started


def test_host_build_builds_once_and_caches(host_build):
    cache, paths, cold_seconds = host_build
    assert len(set(paths)) == 1
    binary = paths[0]
    assert binary.is_file() and os.access(binary, os.X_OK)
    assert binary.is_relative_to(cache)
    # The concurrent callers waited for one build instead of running three.
    log = (binary.parent.parent / "build.log").read_text()
    assert log.count("$ ") == 2, log[:2000]
    started = time.monotonic()
    again = build_host_runner(cache)
    warm = time.monotonic() - started
    assert again == binary
    assert (binary.parent.parent / "build.log").read_text() == log, "built again"
    assert warm < 10, f"cached lookup took {warm:.2f}s (cold build {cold_seconds:.1f}s)"


def test_built_runner_registers_the_delegates_and_needs_no_ld_library_path(host_build):
    binary = host_build[1][0]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = subprocess.run([str(binary), "--list-backends"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    backends = out.stdout.split()
    assert "QnnBackend" in backends and "XnnpackBackend" in backends


# ------------------------------------------------------------------------- (d)

def qnn_env(trace: Path) -> dict[str, str]:
    """The child environment for the HTP simulator, as the harness lays it out."""
    from harness.qnn.sdk import discover

    return {**os.environ, **discover().environment(trace)}


# Runs in a child with the QNN environment: lowers Linear(16,8)+ReLU for SM8650 fp16 when no
# sample program is given, then writes the input and the runtime's own output as raw files.
_MAKE_QNN_CASE = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    out, pte = Path(sys.argv[1]), Path(sys.argv[2])
    torch.manual_seed(0)
    x = torch.randn(1, 16)
    if not pte.exists():
        from executorch.backends.qualcomm.utils.utils import (generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec, get_soc_to_chipset_map,
            to_edge_transform_and_lower_to_qnn)
        model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU()).eval()
        specs = generate_qnn_executorch_compiler_spec(
            soc_model=get_soc_to_chipset_map()["SM8650"],
            backend_options=generate_htp_compiler_spec(use_fp16=True))
        pte.write_bytes(to_edge_transform_and_lower_to_qnn(model, (x,), specs).to_executorch().buffer)
    from executorch.extension.pybindings import _C
    y = _C._load_program(str(pte)).load_method("forward").call([x])[0]
    (out / "in0.bin").write_bytes(x.numpy().tobytes())
    (out / "out0.bin").write_bytes(y.numpy().tobytes())
    (out / "wrong0.bin").write_bytes((y + 1).numpy().tobytes())
""")


@pytest.fixture(scope="session")
def qnn_case(tmp_path_factory):
    work = tmp_path_factory.mktemp("qnn-case")
    env = qnn_env(work / "trace.txt")
    pte = work / "m.pte"
    made = subprocess.run([sys.executable, "-c", _MAKE_QNN_CASE, str(work), str(pte)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert made.returncode == 0, made.stderr[-3000:]
    return work, pte, env


def run_runner(binary: Path, scenario: Path, env: dict | None = None):
    proc = subprocess.run([str(binary), str(scenario)], capture_output=True, text=True,
                          env=env, timeout=300)
    events = [json.loads(line[len(EVENT):]) for line in proc.stdout.splitlines()
              if line.startswith(EVENT)]
    return proc, events


def execute_step(module: str, expected: str = "out0.bin") -> dict:
    return {"op": "execute", "module": module, "method": "forward",
            "inputs": [{"dtype": "float32", "shape": [1, 16], "file": "in0.bin"}],
            "expected": [{"dtype": "float32", "shape": [1, 8], "file": expected}],
            "atol": 0.05, "rtol": 0.05}


def test_runner_runs_a_lifecycle_on_the_simulator(host_build, qnn_case):
    work, pte, env = qnn_case
    scenario = work / "s1.json"
    scenario.write_text(json.dumps({"version": 1, "name": "s1_native", "watch_mappings": [str(pte)],
                                    "steps": [
        {"op": "load_module", "module": "A", "pte": str(pte)},
        {"op": "load_method", "module": "A", "method": "forward"},
        execute_step("A"),
        execute_step("A", expected="wrong0.bin"),
        {"op": "unload_method", "module": "A", "method": "forward"},
        {"op": "unload_method", "module": "A", "method": "forward"},
        execute_step("A"),  # implicit load
        {"op": "destroy_module", "module": "A"},
        {"op": "snapshot"},
        {"op": "load_module", "module": "B", "pte": str(pte)},
        {"op": "load_module", "module": "C", "pte": str(pte)},
        execute_step("B"),
        execute_step("C"),
        {"op": "destroy_module", "module": "B"},
        execute_step("C"),  # 1.5.1: "DelegateHandle has been deleted", Error 1
        {"op": "get_option", "backend": "NoSuchBackend", "key": "k"},
    ]}))
    trace = work / "runner-trace.txt"
    trace.unlink(missing_ok=True)
    started = time.monotonic()
    proc, events = run_runner(host_build[1][0], scenario, dict(env, HARNESS_QNN_TRACE=str(trace)))
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert events[0] == {"event": "start", "runner": "native", "pid": events[0]["pid"],
                         "scenario": "s1_native"}
    steps = [e for e in events if e["event"] == "step"]
    assert [s["index"] for s in steps] == list(range(16))
    status = [s["status"] for s in steps]
    assert status[:4] == ["ok", "ok", "ok", "mismatch"]
    assert status[4:13] == ["ok", "error", "ok", "ok", "ok", "ok", "ok", "ok", "ok"]
    assert steps[5]["error_code"] == -1 and "not loaded" in steps[5]["message"]
    assert steps[2]["outputs"][0]["dtype"] == "float32" and steps[2]["outputs"][0]["shape"] == [1, 8]
    assert steps[2]["max_abs_diff"] <= 0.05 and steps[3]["max_abs_diff"] >= 0.9
    assert steps[3]["outputs"][0]["sha256"] == steps[2]["outputs"][0]["sha256"]
    # The second module after the first one's destruction: the upstream bug, reported, not fatal.
    if steps[14]["status"] != "ok":
        assert steps[14]["status"] == "error" and steps[14]["error_code"] == 1
        assert "Internal" in steps[14]["message"]
    assert steps[15]["status"] == "error" and steps[15]["option"]["supported"] is False
    assert steps[15]["error_code"] == 0x20  # Error::NotFound
    # Trace offsets grow with QNN calls, memory is reported for every step.
    offsets = [s["trace_offset"] for s in steps]
    assert offsets == sorted(offsets) and offsets[1] > offsets[0] >= 0
    assert offsets[-1] == trace.stat().st_size
    for s in steps:
        assert s["memory"]["rollup"]["Rss"] > 0
        assert set(s["memory"]["mappings"]) == {str(pte)}
        assert set(s["memory"]["dmabuf"]) == {"count", "bytes"}
    assert steps[1]["memory"]["rollup"]["Rss"] > steps[0]["memory"]["rollup"]["Rss"]
    assert events[-1] == {"event": "end", "status": "failed", "steps": 16,
                          "failed_steps": sum(s != "ok" for s in status)}
    assert elapsed < 10


def test_runner_exit_2_for_missing_scenario_and_program(host_build, tmp_path):
    binary = host_build[1][0]
    proc, events = run_runner(binary, tmp_path / "missing.json")
    assert proc.returncode == 2 and events == []
    assert "cannot read scenario file" in proc.stderr and "missing.json" in proc.stderr

    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"steps": [
        {"op": "load_module", "module": "A", "pte": "nowhere.pte"}]}))
    proc, events = run_runner(binary, scenario)
    assert proc.returncode == 2 and events == []
    assert "program file not found" in proc.stderr and str(tmp_path / "nowhere.pte") in proc.stderr


@pytest.mark.parametrize("doc, message", [
    ("{not json", "not valid JSON: parse error at line 1, column "),
    (json.dumps({"steps": [{"op": "explode"}]}), "unknown op 'explode'"),
    (json.dumps({"name": "x"}), "missing array field 'steps'"),
    (json.dumps({"steps": [{"op": "execute", "module": "A", "method": "forward",
                            "inputs": [{"dtype": "float32", "shape": [1], "file": "no.bin"}]}]}),
     "tensor file not found"),
    (json.dumps({"steps": [{"op": "execute", "module": "A", "method": "forward",
                            "inputs": [{"dtype": "complex64", "shape": [1], "file": "no.bin"}]}]}),
     "unknown dtype"),
])
def test_runner_exit_2_for_invalid_scenarios(host_build, tmp_path, doc, message):
    scenario = tmp_path / "s.json"
    scenario.write_text(doc)
    proc, events = run_runner(host_build[1][0], scenario)
    assert proc.returncode == 2 and events == []
    assert message in proc.stderr


def test_runner_snapshot_only_scenario_is_fast_and_ok(host_build, tmp_path):
    scenario = tmp_path / "s.json"
    watched = tmp_path / "not-mapped.bin"
    scenario.write_text(json.dumps({"watch_mappings": [str(watched)],
                                    "steps": [{"op": "snapshot"}]}))
    proc, events = run_runner(host_build[1][0], scenario, dict(os.environ, HARNESS_QNN_TRACE=""))
    assert proc.returncode == 0, proc.stderr
    step = events[1]
    assert step["status"] == "ok" and step["trace_offset"] == 0 and step["outputs"] == []
    assert step["module"] is None and step["method"] is None and step["option"] is None
    assert step["memory"]["mappings"][str(watched)]["Rss"] == 0
    assert events[-1] == {"event": "end", "status": "ok", "steps": 1, "failed_steps": 0}


def test_runner_writes_events_as_json_dumps_does(host_build, tmp_path):
    name = 'a "quoted" \\ name\twith \u00e9 \u2603 and \x01'
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"name": name, "watch_mappings": ["x.bin"],
                                    "steps": [{"op": "snapshot"}, {"op": "snapshot"}]}))
    proc, events = run_runner(host_build[1][0], scenario, dict(os.environ, HARNESS_QNN_TRACE=""))
    assert proc.returncode == 0, proc.stderr
    assert events[0]["scenario"] == name
    lines = [line[len(EVENT):] for line in proc.stdout.splitlines() if line.startswith(EVENT)]
    # Separators, key order, escapes and number spelling of the Python runner's json.dumps
    # (which also escapes non-ASCII characters; the native runner writes them as UTF-8).
    assert lines == [json.dumps(event, ensure_ascii=False) for event in events]
    assert lines[1].startswith('{"event": "step", "index": 0, "op": "snapshot", "module": null, ')


# ------------------------------------------------------------------------- (e)

_MAKE_XNN_CASE = textwrap.dedent("""
    import sys, torch
    from pathlib import Path
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    out = Path(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
    x = torch.randn(1, 64)
    prog = to_edge_transform_and_lower(torch.export.export(model, (x,)),
                                       partitioner=[XnnpackPartitioner()]).to_executorch()
    (out / "x.pte").write_bytes(prog.buffer)
    (out / "xin.bin").write_bytes(x.numpy().tobytes())
    with torch.no_grad():
        (out / "xout.bin").write_bytes(model(x).numpy().tobytes())
""")


def test_xnnpack_backend_options_reach_the_runtime(host_build, tmp_path):
    made = subprocess.run([sys.executable, "-c", _MAKE_XNN_CASE, str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    cache = tmp_path / "xnn.cache"
    execute = {"op": "execute", "module": "A", "method": "forward",
               "inputs": [{"dtype": "float32", "shape": [1, 64], "file": "xin.bin"}],
               "expected": [{"dtype": "float32", "shape": [1, 8], "file": "xout.bin"}],
               "atol": 1e-4, "rtol": 1e-4}
    scenario = tmp_path / "xnn.json"
    scenario.write_text(json.dumps({"version": 1, "name": "xnn", "watch_mappings": ["xnn.cache"],
                                    "steps": [
        {"op": "load_module", "module": "A", "pte": "x.pte",
         "backend_options": {"XnnpackBackend": {"weight_cache_enabled": True,
                                                "packed_cache_path": str(cache)}}},
        {"op": "load_method", "module": "A", "method": "forward"},
        {"op": "load_method", "module": "A", "method": "forward"},
        execute,
        {"op": "set_option", "backend": "XnnpackBackend", "key": "workspace_sharing_mode",
         "value": 1},
        {"op": "get_option", "backend": "XnnpackBackend", "key": "workspace_sharing_mode",
         "type": "int"},
        {"op": "destroy_module", "module": "A"},
    ]}))
    proc, events = run_runner(host_build[1][0], scenario)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["status"] for s in steps] == ["ok", "ok", "error", "ok", "ok", "ok", "ok"], proc.stderr
    assert proc.returncode == 1
    assert "already loaded" in steps[2]["message"]
    assert cache.is_file() and cache.stat().st_size > 0
    mapped = [s["memory"]["mappings"][str(cache)]["Rss"] for s in steps]
    assert mapped[0] == 0 and mapped[1] > 0 and mapped[-1] == 0
    assert steps[4]["option"] == {"backend": "XnnpackBackend", "key": "workspace_sharing_mode",
                                  "value": 1, "supported": True}
    assert steps[5]["option"]["value"] == 1
