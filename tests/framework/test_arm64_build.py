"""arm64 builds and the loopback device's arm64 mode.

(a) the arm64-linux and Android command lines (toolchain file, one cmake command builder for
host, arm64-linux and Android, interposer lines) and `device_build`'s decision rules;
(b) a real cold cross-build of the runner and the QNN interposer, both aarch64 ELF;
(c) the arm64 runner under qemu-aarch64: no QnnBackend, and an XNNPACK scenario gives the same
outputs as the x86_64 runner;
(d) the loopback device in arm64 mode through the real adb server: it reports arm64-v8a and
runs a pushed aarch64 runner (under qemu) from an unchanged `cd dir && VAR=x ./runner` command.

The cross toolchain and qemu-user come from scripts/setup.sh (g++-aarch64-linux-gnu,
gcc-aarch64-linux-gnu, qemu-user); without them (b)-(d) skip and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path, PurePosixPath

import pytest

from harness.errors import DeviceError
from harness.loopback import DEFAULT_PROPERTIES, LoopbackDevice, connect, disconnect
from harness.loopback import emulation
from harness.runner import select
from harness.runner.builds import RunnerBuildError
from harness.runner.builds.aarch64_wheel import aarch64_executorch_dir
from harness.runner.builds.android import (
    android_build_commands,
    android_dlopen_shim_command,
    android_interposer_command,
    build_android_runner,
)
from harness.runner.builds.arm64_linux import (
    CROSS_PACKAGES,
    arm64_linux_available,
    arm64_linux_build_commands,
    arm64_linux_dlopen_shim_command,
    arm64_linux_interposer_command,
    arm64_linux_toolchain_text,
    build_arm64_linux,
)
from harness.runner.builds.cli import main as build_runner
from harness.runner.builds.cmake import (
    COMPONENTS_FILE,
    build_backends,
    build_components,
    cmake_commands,
)
from harness.runner.builds.host import (
    build_host_runner,
    host_build_commands,
    host_runner_available,
)
from harness.runner.builds.inputs import executorch_package_dir
from harness.runtime import executorch_version
from harness.runner.select import DeviceBuild, device_build
from test_loopback import ADB, _adb, _client

EVENT = "HARNESS_EVENT "
CROSS_OK, CROSS_WHY = arm64_linux_available()
QEMU = emulation.find_qemu()
needs_cross = pytest.mark.skipif(not CROSS_OK, reason=f"no arm64-linux build here: {CROSS_WHY}")
needs_qemu = pytest.mark.skipif(
    QEMU is None or not CROSS_OK,
    reason="qemu-aarch64 or the cross toolchain is not installed "
           f"(apt-get install {CROSS_PACKAGES}; scripts/setup.sh does it)")
needs_adb = pytest.mark.skipif(ADB is None, reason="adb client binary not installed (apt install adb)")


# ------------------------------------------------------------------------- (a) commands


def test_toolchain_file_names_the_cross_compilers_and_the_wheel(tmp_path):
    text = arm64_linux_toolchain_text(tmp_path / "et")
    lines = text.splitlines()
    assert "set(CMAKE_SYSTEM_NAME Linux)" in lines
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in lines
    assert "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)" in lines
    assert f'set(CMAKE_PREFIX_PATH "{tmp_path / "et"}")' in lines
    cc = next(l for l in lines if l.startswith("set(CMAKE_C_COMPILER "))
    cxx = next(l for l in lines if l.startswith("set(CMAKE_CXX_COMPILER "))
    assert cc.endswith('aarch64-linux-gnu-gcc")') and cxx.endswith('aarch64-linux-gnu-g++")')
    assert 'set(CMAKE_FIND_ROOT_PATH "/usr/aarch64-linux-gnu")' in lines


def test_host_arm64_and_android_share_one_command_builder(tmp_path):
    build = tmp_path / "b"
    base_configure, base_build = cmake_commands(build, None, [])
    n = len(base_configure)
    host = host_build_commands(build)
    arm = arm64_linux_build_commands(build, tmp_path / "tc.cmake", tmp_path / "et")
    android = android_build_commands(build, tmp_path / "ndk", tmp_path / "prefix")
    for configure, build_line in (host, arm, android):
        assert configure[:n] == base_configure
        assert build_line == base_build
    pkg = executorch_package_dir()
    assert host[0][n:] == [f"-DCMAKE_PREFIX_PATH={pkg if pkg else '<site-packages>/executorch'}"]
    assert arm[0][n:] == [f"-DCMAKE_TOOLCHAIN_FILE={tmp_path / 'tc.cmake'}",
                          f"-DCMAKE_PREFIX_PATH={tmp_path / 'et'}"]
    assert "-DANDROID_ABI=arm64-v8a" in android[0][n:]


def test_interposer_lines_for_arm64_linux_and_android(tmp_path):
    from harness.qnn.interposer_build import SOURCE, interposer_command

    host = interposer_command(tmp_path / "h.so")
    arm = arm64_linux_interposer_command(tmp_path / "a.so")
    android = android_interposer_command(tmp_path / "d.so", tmp_path / "ndk", 31)
    assert Path(arm[0]).name == "aarch64-linux-gnu-gcc"
    assert arm[1:] == [*host[1:host.index("-o") + 1], str(tmp_path / "a.so"), str(SOURCE),
                       "-ldl", "-lpthread"]
    assert android[0] == str(tmp_path / "ndk" / "toolchains" / "llvm" / "prebuilt" /
                             "linux-x86_64" / "bin" / "aarch64-linux-android31-clang")
    assert "-Wl,-z,nodelete" not in android and "-ldl" in android  # it pins itself, or not
    assert "-lpthread" not in android  # bionic has no libpthread
    # the dlopen shim: the same lines with the shim's flags after the compiler
    from harness.qnn.interposer_build import DLOPEN_SHIM_FLAGS

    arm_shim = arm64_linux_dlopen_shim_command(tmp_path / "a.so")
    android_shim = android_dlopen_shim_command(tmp_path / "d.so", tmp_path / "ndk", 31)
    assert arm_shim == [arm[0], *DLOPEN_SHIM_FLAGS, *arm[1:]]
    assert android_shim == [android[0], *DLOPEN_SHIM_FLAGS, *android[1:]]


def test_print_commands_for_arm64_linux_and_android(capsys):
    assert build_runner(["--arm64-linux", "--print-commands"]) == 0
    out = capsys.readouterr().out
    assert "pip download --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64" in out
    assert f"executorch=={executorch_version()}" in out
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in out
    assert "-DCMAKE_TOOLCHAIN_FILE=" in out and "aarch64-linux-gnu.toolchain.cmake" in out
    assert "aarch64-linux-gnu-gcc -O2" in out and "interposer.c" in out
    assert "aarch64-linux-gnu-gcc -DHARNESS_DLOPEN_SHIM" in out
    assert "libharness_qnn_dlopen.so" in out
    assert build_runner(["--android", "--print-commands"]) == 0
    out = capsys.readouterr().out
    assert "android.toolchain.cmake" in out
    assert "aarch64-linux-android30-clang" in out and "libQnnHtp.so" in out
    assert "aarch64-linux-android30-clang' -DHARNESS_DLOPEN_SHIM" in out  # a quoted path
    assert "libharness_qnn_dlopen.so" in out


def test_android_build_needs_the_ndk_clang_for_the_interposer(tmp_path):
    ndk = tmp_path / "ndk"
    (ndk / "build" / "cmake").mkdir(parents=True)
    (ndk / "build" / "cmake" / "android.toolchain.cmake").write_text("")
    prefix = tmp_path / "prefix"
    (prefix / "lib" / "cmake" / "ExecuTorch").mkdir(parents=True)
    (prefix / "lib" / "cmake" / "ExecuTorch" / "executorch-config.cmake").write_text("")
    with pytest.raises(RunnerBuildError, match="aarch64-linux-android33-clang"):
        build_android_runner(tmp_path / "b", ndk, prefix, platform=33)


def test_backends_come_from_the_linked_components(tmp_path):
    (tmp_path / COMPONENTS_FILE).write_text(
        "kernels_optimized\nbackend_xnnpack\nbackend_openvino\n")
    assert build_backends(tmp_path) == ("XnnpackBackend", "OpenvinoBackend")
    (tmp_path / COMPONENTS_FILE).write_text("backend_qnn\nbackend_xnnpack\n")
    assert build_backends(tmp_path) == ("QnnBackend", "XnnpackBackend")
    assert build_backends(tmp_path / "none") == ()


# ------------------------------------------------------------------ (a) device_build rules


def _fake_android_build(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "harness-runner").write_bytes(b"\x7fELF")
    (root / "libQnnHtp.so").write_bytes(b"\x7fELF")
    (root / "libharness_qnn_dlopen.so").write_bytes(b"\x7fELF")
    (root / "lib").mkdir()
    (root / "lib" / "libqnn_executorch_backend.so").write_bytes(b"\x7fELF")
    (root / COMPONENTS_FILE).write_text("backend_xnnpack\nbackend_qnn\n")
    return root


def test_android_build_from_the_environment_wins(tmp_path, monkeypatch):
    root = _fake_android_build(tmp_path / "android")
    monkeypatch.setenv(select.ANDROID_BUILD_ENV, str(root))
    monkeypatch.setattr("harness.runner.builds.arm64_linux.build_arm64_linux",
                        lambda *a, **k: pytest.fail("must not build arm64-linux"))
    build = device_build("arm64-v8a")
    assert build == DeviceBuild("arm64-v8a", root / "harness-runner", root / "libQnnHtp.so",
                                (root / "lib",), ("XnnpackBackend", "QnnBackend"), "android",
                                root / "libharness_qnn_dlopen.so")
    assert build.libraries() == (root / "lib" / "libqnn_executorch_backend.so",)


def test_android_build_dir_without_a_runner_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(select.ANDROID_BUILD_ENV, str(tmp_path))
    with pytest.raises(DeviceError, match="build-runner --android"):
        device_build("arm64-v8a")


def test_arm64_linux_build_when_the_cross_toolchain_is_there(tmp_path, monkeypatch):
    monkeypatch.delenv(select.ANDROID_BUILD_ENV, raising=False)
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    (build_dir / COMPONENTS_FILE).write_text("backend_xnnpack\n")
    monkeypatch.setattr("harness.runner.builds.arm64_linux.arm64_linux_available",
                        lambda: (True, ""))
    monkeypatch.setattr("harness.runner.builds.arm64_linux.build_arm64_linux",
                        lambda *a, **k: build_dir)
    monkeypatch.setattr("harness.runner.builds.aarch64_wheel.aarch64_executorch_dir",
                        lambda *a, **k: tmp_path / "et")
    assert device_build("arm64-v8a") == DeviceBuild(
        "arm64-v8a", build_dir / "harness-runner", build_dir / "libQnnHtp.so",
        (tmp_path / "et" / "lib",), ("XnnpackBackend",), "arm64-linux",
        build_dir / "libharness_qnn_dlopen.so")


def test_no_arm64_build_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv(select.ANDROID_BUILD_ENV, raising=False)
    monkeypatch.setattr("harness.runner.builds.arm64_linux.arm64_linux_available",
                        lambda: (False, "the arm64 cross toolchain is not installed"))
    with pytest.raises(DeviceError) as err:
        device_build("arm64-v8a")
    text = str(err.value)
    assert "build-runner --android" in text and select.ANDROID_BUILD_ENV in text
    assert "apt-get install g++-aarch64-linux-gnu" in text


def test_failed_arm64_build_and_unknown_abi_are_device_errors(monkeypatch):
    monkeypatch.delenv(select.ANDROID_BUILD_ENV, raising=False)
    monkeypatch.setattr("harness.runner.builds.arm64_linux.arm64_linux_available",
                        lambda: (True, ""))

    def broken(*a, **k):
        raise RunnerBuildError("configure failed")

    monkeypatch.setattr("harness.runner.builds.arm64_linux.build_arm64_linux", broken)
    with pytest.raises(DeviceError, match=r"arm64-linux build .* failed: configure failed"):
        device_build("arm64-v8a")
    with pytest.raises(DeviceError, match="armeabi-v7a"):
        device_build("armeabi-v7a")


def test_x86_64_gets_the_host_build():
    ok, why = host_runner_available()
    if not ok:
        pytest.skip(f"host build impossible here: {why}")
    build = device_build("x86_64")
    assert build.kind == "host" and build.lib_dirs == ()
    assert build.runner == select.choose_runner("native").binary
    assert build.interposer is not None and build.interposer.name == "libQnnHtp.so"
    assert build.dlopen_shim is not None and build.dlopen_shim.name == "libharness_qnn_dlopen.so"
    assert "QnnBackend" in build.backends and "XnnpackBackend" in build.backends


# ------------------------------------------------------------------ (b) real cross-build


@pytest.fixture(scope="session")
def arm64_build(tmp_path_factory):
    """A real cold arm64-linux build (runner and interposer) into a fresh cache."""
    if not CROSS_OK:
        pytest.skip(f"no arm64-linux build here: {CROSS_WHY}")
    cache = tmp_path_factory.mktemp("arm64-cache")
    aarch64_executorch_dir()  # the wheel (downloaded once per machine) is not timed
    started = time.monotonic()
    build_dir = build_arm64_linux(cache)
    cold = time.monotonic() - started
    print(f"\narm64-linux cold cross-build (runner + interposer): {cold:.1f} s")
    return build_dir, cold


@needs_cross
def test_cross_build_gives_aarch64_runner_and_interposer(arm64_build):
    build_dir, _cold = arm64_build
    runner, interposer = build_dir / "harness-runner", build_dir / "libQnnHtp.so"
    assert emulation.elf_machine(runner) == emulation.EM_AARCH64
    assert emulation.elf_machine(interposer) == emulation.EM_AARCH64
    # the dlopen shim an arm64 device's runner preloads, built with them, defining what it
    # stands in for (the runtime's dlopen and dlclose, libQnnSystem.so's entry point)
    shim = build_dir / "libharness_qnn_dlopen.so"
    assert emulation.elf_machine(shim) == emulation.EM_AARCH64
    nm = shutil.which("aarch64-linux-gnu-nm")
    if nm:
        symbols = subprocess.run([nm, "-D", "--defined-only", str(shim)], capture_output=True,
                                 text=True).stdout.split()
        assert {"dlopen", "dlclose", "QnnSystemInterface_getProviders"} <= set(symbols)
    if shutil.which("file"):
        assert "ARM aarch64" in subprocess.run(["file", "-L", str(runner)], capture_output=True,
                                               text=True).stdout
        described = subprocess.run(["file", "-L", str(interposer)], capture_output=True,
                                   text=True).stdout
        assert "ARM aarch64" in described and "shared object" in described
    log = (build_dir.parent / "build.log").read_text()
    assert "harness-runner: QNN backend: not in this executorch package" in log
    assert "backend_qnn" not in build_components(build_dir)
    assert "backend_xnnpack" in build_components(build_dir)
    started = time.monotonic()
    assert build_arm64_linux(build_dir.parent.parent.parent) == build_dir
    assert (build_dir.parent / "build.log").read_text() == log, "built again"
    assert time.monotonic() - started < 10  # cached: a lookup, not a build


@needs_cross
def test_cli_builds_arm64_linux_and_prints_the_directory(arm64_build, capsys):
    build_dir, _ = arm64_build
    cache = build_dir.parent.parent.parent
    assert build_runner(["--arm64-linux", "--cache-dir", str(cache)]) == 0
    assert capsys.readouterr().out.strip() == str(build_dir)


# ------------------------------------------------------------------ (c) under qemu


def _qemu_argv(program: Path, *args: str) -> list[str]:
    return [QEMU, "-L", str(emulation.QEMU_SYSROOT), str(program), *args]


def _aarch64_env() -> dict[str, str]:
    lib = aarch64_executorch_dir() / "lib"
    return {**os.environ, "LD_LIBRARY_PATH": str(lib)}


@pytest.fixture(scope="session")
def xnn_case(tmp_path_factory):
    """The XNNPACK linear stack (.pte is architecture independent) and a scenario over it."""
    from harness.programs.compile import compile_model
    from harness.programs.models import get_model
    from harness.qnn.sdk import discover
    from harness.scenario import Scenario

    model = compile_model(get_model("xnn_linear_stack"), "SM8650", "fp32", discover())
    scenario = (Scenario("arm64_parity").load_module("A", model).load_method("A", "forward")
                .execute("A", "forward", emit_outputs=True).destroy_module("A"))
    work = tmp_path_factory.mktemp("xnn-case")
    return model, scenario, scenario.write(work / "scenario.json")


def _events(stdout: str) -> list[dict]:
    return [json.loads(l[len(EVENT):]) for l in stdout.splitlines() if l.startswith(EVENT)]


def _outputs(events: list[dict]) -> list[tuple]:
    return [(e["index"], [o["sha256"] for o in e["outputs"]], e.get("max_abs_diff"))
            for e in events if e.get("event") == "step" and e.get("op") == "execute"]


@needs_qemu
def test_arm64_runner_lists_backends_without_qnn(arm64_build):
    build_dir, _ = arm64_build
    out = subprocess.run(_qemu_argv(build_dir / "harness-runner", "--list-backends"),
                         capture_output=True, text=True, env=_aarch64_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    backends = out.stdout.split()
    assert "XnnpackBackend" in backends and "QnnBackend" not in backends
    assert set(backends) == set(build_backends(build_dir))


@needs_qemu
def test_arm64_runner_matches_the_x86_64_runner(arm64_build, xnn_case):
    ok, why = host_runner_available()
    if not ok:
        pytest.skip(f"host build impossible here: {why}")
    build_dir, _ = arm64_build
    _, _, scenario = xnn_case
    host = build_host_runner()
    started = time.monotonic()
    native = subprocess.run([str(host), str(scenario)], capture_output=True, text=True,
                            timeout=300)
    native_s = time.monotonic() - started
    started = time.monotonic()
    emulated = subprocess.run(_qemu_argv(build_dir / "harness-runner", str(scenario)),
                              capture_output=True, text=True, env=_aarch64_env(), timeout=600)
    qemu_s = time.monotonic() - started
    print(f"\nxnn_linear_stack scenario wall time: x86_64 native {native_s:.2f} s, "
          f"arm64 under qemu {qemu_s:.2f} s")
    assert native.returncode == 0, native.stderr[-3000:]
    assert emulated.returncode == 0, emulated.stderr[-3000:]
    host_events, arm_events = _events(native.stdout), _events(emulated.stdout)
    assert arm_events[-1]["event"] == "end" and arm_events[-1]["status"] == "ok"
    assert _outputs(host_events) and _outputs(arm_events) == _outputs(host_events)


# --------------------------------------------------------------- (d) loopback arm64 mode


def test_default_mode_is_unchanged(tmp_path):
    device = LoopbackDevice(tmp_path / "sb")
    assert device.properties == DEFAULT_PROPERTIES and not device.arm64
    device.start()
    try:
        assert device._launcher is None
        assert not (device.sandbox / ".bin" / emulation.LAUNCHER).exists()
    finally:
        device.stop()


def test_arm64_mode_properties(tmp_path):
    device = LoopbackDevice(tmp_path / "sb", properties={"ro.product.cpu.abi": "arm64-v8a"})
    assert device.arm64
    assert device.properties["ro.product.cpu.abilist"] == "arm64-v8a"
    assert device.properties["ro.product.cpu.abilist64"] == "arm64-v8a"
    explicit = LoopbackDevice(tmp_path / "sb2", properties={
        "ro.product.cpu.abi": "arm64-v8a", "ro.product.cpu.abilist": "arm64-v8a,armeabi-v7a"})
    assert explicit.properties["ro.product.cpu.abilist"] == "arm64-v8a,armeabi-v7a"


@pytest.mark.parametrize("command, wrapped", [
    ("cd dir && VAR=x ./runner scenario.json", "cd dir && VAR=x L ./runner scenario.json"),
    ("{ A='/x;y' B=1 '/s/ws/runner' s.json 2>'/s/e' & pid=$!; echo $pid; wait $pid; }",
     "{ A='/x;y' B=1 L '/s/ws/runner' s.json 2>'/s/e' & pid=$!; echo $pid; wait $pid; }"),
    ("ls /data/x; cat /proc/meminfo | grep Mem", "ls /data/x; cat /proc/meminfo | grep Mem"),
    ("echo $(./a) `./b` \"$(./c)\"", "echo $(L ./a) `L ./b` \"$(L ./c)\""),
    ("2>/dev/null ./x a/b > out/f", "2>/dev/null L ./x a/b > out/f"),
    ("for f in ./a ./b; do ./c $f; done", "for f in ./a ./b; do L ./c $f; done"),
    ("if [ -x ./r ]; then ./r; fi", "if [ -x ./r ]; then L ./r; fi"),
    ("env -i P=/x ./r; nice -n 5 ./n; timeout -s KILL 10 ./t; exec ./e",
     "env -i P=/x L ./r; nice -n 5 L ./n; timeout -s KILL 10 L ./t; exec L ./e"),
    ("command -v ./x; echo '/a ./b' \"./c\" # ./d", "command -v ./x; echo '/a ./b' \"./c\" # ./d"),
    ("cat <<EOF\n./not\nEOF\n./yes", "cat <<EOF\n./not\nEOF\nL ./yes"),
    ("(cd x && ./r) | ./s", "(cd x && L ./r) | L ./s"),
    ('"$dir"/runner a', 'L "$dir"/runner a'),
])
def test_command_wrapping(command, wrapped):
    assert emulation.wrap_programs(command, "L") == wrapped


@needs_qemu
def test_launcher_runs_aarch64_under_qemu_and_the_rest_directly(arm64_build, tmp_path):
    build_dir, _ = arm64_build
    launcher = emulation.install_launcher(tmp_path, QEMU)
    out = subprocess.run([str(launcher), str(build_dir / "harness-runner"), "--list-backends"],
                         capture_output=True, text=True, env=_aarch64_env(), timeout=120)
    assert out.returncode == 0 and "XnnpackBackend" in out.stdout.split(), out.stderr
    assert subprocess.run([str(launcher), "/bin/echo", "hi"], capture_output=True,
                          text=True).stdout == "hi\n"
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\necho \"script $1\"\n")
    script.chmod(0o755)
    assert subprocess.run([str(launcher), str(script), "x"], capture_output=True,
                          text=True).stdout == "script x\n"
    no_qemu = emulation.install_launcher(tmp_path / "noqemu", None)
    missing = subprocess.run([str(no_qemu), str(build_dir / "harness-runner")],
                             capture_output=True, text=True)
    assert missing.returncode == 126 and "qemu-user" in missing.stderr


def test_an_aarch64_preload_reaches_the_runner_under_qemu(arm64_build, tmp_path):
    """--runtime-variant's wrapper cross-built for arm64 is preloaded into the aarch64 runner
    under qemu: the guest's loader opens it. (The x86_64 programs on the way, the launcher's
    shell and qemu itself, say once each that they cannot preload it, and go on: emulation
    noise on stderr that an arm64 device does not have.)"""
    from harness.runner.builds.arm64_linux import build_arm64_wrapper

    build_dir, _ = arm64_build
    wrapper = build_arm64_wrapper()
    assert emulation.elf_machine(wrapper) == 183  # EM_AARCH64
    launcher = emulation.install_launcher(tmp_path, QEMU)
    out = subprocess.run([str(launcher), str(build_dir / "harness-runner"), "--list-backends"],
                         capture_output=True, text=True, timeout=120,
                         env={**_aarch64_env(), "LD_PRELOAD": str(wrapper), "QEMU_STRACE": "1"})
    assert out.returncode == 0 and "XnnpackBackend" in out.stdout.split(), out.stderr[-2000:]
    assert f'openat(AT_FDCWD,"{wrapper}"' in out.stderr


@pytest.fixture(scope="module")
def arm64_loopback(tmp_path_factory):
    """A connected loopback device in arm64 mode."""
    if ADB is None:
        pytest.skip("adb client binary not installed (apt install adb)")
    subprocess.run([ADB, "start-server"], check=True, capture_output=True, timeout=30)
    device = LoopbackDevice(tmp_path_factory.mktemp("arm64_sandbox"),
                            properties={"ro.product.cpu.abi": "arm64-v8a"}).start()
    try:
        connect(device.serial, adb=ADB)
        yield device
    finally:
        disconnect(device.serial, adb=ADB, missing_ok=True)
        device.stop()


@needs_adb
def test_arm64_loopback_reports_arm64(arm64_loopback):
    dev = _client().device(arm64_loopback.serial)
    assert dev.shell("getprop ro.product.cpu.abi") == "arm64-v8a"
    assert dev.shell("getprop ro.product.cpu.abilist") == "arm64-v8a"
    # host programs named by path still run (not aarch64: exec'd unchanged)
    out = _adb("-s", arm64_loopback.serial, "shell", "/bin/echo hi && ./no-such-program")
    assert out.stdout == b"hi\n" and out.returncode == 127


@needs_adb
@needs_qemu
def test_arm64_loopback_runs_a_pushed_runner(arm64_loopback, arm64_build, xnn_case):
    """What an adb integration does on an arm64-v8a device: push the runner, the interposer
    and the libraries of `device_build`, the program and its tensors, then start the runner
    with a relative scenario path from its run directory."""
    build_dir, _ = arm64_build
    _model, scenario, host_scenario = xnn_case
    dev = _client().device(arm64_loopback.serial)
    ws = PurePosixPath("/data/local/tmp/hil-arm64")
    build = DeviceBuild("arm64-v8a", build_dir / "harness-runner", build_dir / "libQnnHtp.so",
                        (aarch64_executorch_dir() / "lib",),
                        build_backends(build_dir), "arm64-linux")
    dev.sync.push(build.runner, str(ws / "executorch_hil_runner"), mode=0o755)
    dev.sync.push(build.interposer, str(ws / "libQnnHtp.so"))
    for lib in build.libraries():
        dev.sync.push(lib, str(ws / lib.name))
    for path in scenario.files():
        dev.sync.push(path, str(ws / "files" / path.name))
    local = scenario.write(host_scenario.with_name("device.json"),
                           lambda p: f"../files/{p.name}")
    dev.sync.push(local, str(ws / "run" / "scenario.json"))

    listed = _adb("-s", arm64_loopback.serial, "shell",
                  f"cd {ws} && LD_LIBRARY_PATH={ws} ./executorch_hil_runner --list-backends")
    assert listed.returncode == 0, listed.stderr
    assert "XnnpackBackend" in listed.stdout.decode().split()
    assert "QnnBackend" not in listed.stdout.decode().split()

    started = time.monotonic()
    run = _adb("-s", arm64_loopback.serial, "shell",
               f"cd {ws}/run && LD_LIBRARY_PATH={ws}:\"$LD_LIBRARY_PATH\" "
               f"../executorch_hil_runner scenario.json", timeout=600)
    elapsed = time.monotonic() - started
    print(f"\nxnn_linear_stack scenario on the arm64 loopback (adb shell + qemu): {elapsed:.2f} s")
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    events = _events(run.stdout.decode())
    assert events[-1] == {"event": "end", "status": "ok", "steps": 4, "failed_steps": 0}
    host = build_host_runner() if host_runner_available()[0] else None
    if host is not None:
        native = subprocess.run([str(host), str(host_scenario)], capture_output=True, text=True,
                                timeout=300)
        assert _outputs(events) == _outputs(_events(native.stdout))


@needs_adb
@needs_qemu
def test_arm64_loopback_pid_is_the_program_and_kill_stops_it(arm64_loopback, tmp_path):
    """adb/device.py's timeout path: `prog & pid=$!` then `kill -9 $pid` must stop the program, so the
    launcher and qemu must run in the pid the shell reports (exec, no extra process)."""
    source = tmp_path / "sleeper.c"
    source.write_text("#include <unistd.h>\nint main(void) { sleep(60); return 0; }\n")
    binary = tmp_path / "sleeper"
    subprocess.run(["aarch64-linux-gnu-gcc", "-O2", "-o", str(binary), str(source)], check=True)
    assert emulation.elf_machine(binary) == emulation.EM_AARCH64
    dev = _client().device(arm64_loopback.serial)
    dev.sync.push(binary, "/data/local/tmp/sleeper", mode=0o755)
    started = _adb("-s", arm64_loopback.serial, "shell",
                   "cd /data/local/tmp && { ./sleeper >/dev/null 2>&1 & pid=$!; echo PID $pid; }")
    pid = started.stdout.decode().split()[1]
    deadline = time.monotonic() + 10
    while True:  # the same pid runs the launcher (sh), which then execs qemu
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if Path(cmdline[0].decode()).name.startswith("qemu-aarch64") or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert Path(cmdline[0].decode()).name.startswith("qemu-aarch64"), cmdline
    assert cmdline[-2].endswith(b"sleeper"), cmdline
    assert _adb("-s", arm64_loopback.serial, "shell", f"kill -9 {pid}").returncode == 0
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    status = Path(f"/proc/{pid}/status")
    assert not status.exists() or "zombie" in status.read_text()
