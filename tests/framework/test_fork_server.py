"""The fork server (harness/runner/fork_server.py, `harness-runner --serve`): a scenario run as
a fork gives what a new process gives, a hung fork is killed and the server goes on, and a
server whose libraries started a thread refuses to fork.

One test of every scenario kind in both isolation modes is compared in test_isolation_parity.py.
"""
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from harness.devices.simulator import SimulatorDevice
from harness.drive.driver import ScenarioDriver
from harness.protocol.memory import ALLOCATOR_ENV
from harness.runner.fork_server import ForkServer, ForkServerError
from harness.runner.select import choose_runner
from harness.scenario import Scenario
from harness.scenario.library import s1_two_modules, s4_cleanup_reload

from run_parity import same_steps


@pytest.fixture(scope="module")
def native():
    choice = choose_runner("native")
    if choice.kind != "native":
        pytest.fail(f"native runner unavailable: {choice.notice}")
    return choice


@pytest.fixture
def both_isolations(hil_session, native, tmp_path):
    devices = {iso: SimulatorDevice(hil_session.sdk, hil_session.soc, native, isolation=iso)
               for iso in ("fork", "process")}
    yield {iso: ScenarioDriver(device, tmp_path / iso, 300) for iso, device in devices.items()}
    for device in devices.values():
        device.close()


def test_fork_gives_what_a_process_gives(both_isolations, compiled_model):
    """S1 (fails on 1.5.1 at the survivor's execute: an error path) and S4, QNN on the
    simulator: same steps, statuses, error codes, live QNN counts and outputs; the QNN trace of
    the fork is its own (it starts at the fork's first call, not the server's)."""
    model = compiled_model("linear_relu")
    for sc in (s1_two_modules(model, "A"), s4_cleanup_reload(model)):
        fork = both_isolations["fork"].run(sc, allow_crash=True)
        process = both_isolations["process"].run(sc, allow_crash=True)
        assert fork.completed and process.completed, fork.crash_report()
        same_steps(fork, process)
        # Numbered from 1: the fork's first QNN call or dlopen (the runtime's RTLD_NOLOAD
        # probe of libQnnHtp.so), none of the server's.
        assert re.match(r"1 (api|dlopen) ", fork.output.trace_text), fork.output.trace_text[:200]
        # A process opens libQnnHtp.so itself (its `library_open`); a fork finds it loaded.
        opened = [r.kind for r in process.trace if r.kind.startswith("library_")]
        assert opened == ["library_open"], process.output.trace_text
        # The runtime's own dlopens (traced by the dlopen shim) differ as loading does: a
        # process's RTLD_NOLOAD probe finds nothing and it opens the library, a fork's probe
        # finds it; every QNN call is the same.
        calls = [[r for r in result.trace if r.kind != "dlopen"] for result in (fork, process)]
        assert len(calls[0]) == len(calls[1]) - 1


def test_each_fork_starts_with_an_empty_delegate_cache(both_isolations, compiled_model):
    """Two forks in a row from one server: the second does not see the first's QNN context
    (its load creates a context from the binary again, and its trace shows it)."""
    model = compiled_model("linear_relu")
    driver = both_isolations["fork"]
    first = driver.run(Scenario("first").load_module("A", model).execute("A", "forward"))
    second = driver.run(Scenario("second").load_module("A", model).execute("A", "forward"))
    for result in (first, second):
        created = [r for r in result.trace if r.kind == "context_create"]
        assert len(created) == 1 and "binary" in created[0].fields, result.output.trace_text
        assert result.steps[-1].live["context"] == 1, result.steps[-1].live


@pytest.fixture
def server_env(hil_session, tmp_path):
    return {**os.environ, **ALLOCATOR_ENV, **hil_session.sdk.environment(None)}


def test_a_hung_fork_is_killed_and_the_server_goes_on(native, server_env, tmp_path):
    """A scenario file that is a FIFO nobody writes: reading it blocks forever. The fork is
    killed at the timeout with everything it started (its own process group); the next
    scenario runs in a fork of the same server."""
    hang = tmp_path / "hang.json"
    os.mkfifo(hang)
    quick = tmp_path / "quick.json"
    quick.write_text(json.dumps({"version": 1, "name": "quick", "steps": [{"op": "snapshot"}]}))
    server = ForkServer(native.binary, [], server_env)
    try:
        started = time.monotonic()
        out = server.run(hang, server_env, 2.0)
        assert out.timed_out and out.returncode is None
        assert time.monotonic() - started < 30
        again = server.run(quick, server_env, 60)
        assert again.returncode == 0 and not again.timed_out, again.stderr
        assert '"event": "end"' in again.stdout
        assert server.alive()
    finally:
        server.close()


def test_a_failed_preload_is_named(native, server_env):
    with pytest.raises(ForkServerError, match=r"cannot preload libDoesNotExist\.so"):
        ForkServer(native.binary, ["libDoesNotExist.so"], server_env)


def threaded_library(tmp_path) -> Path:
    """A shared library that starts a thread when it is loaded."""
    source = tmp_path / "threaded.c"
    source.write_text(
        "#include <pthread.h>\n#include <unistd.h>\n"
        "static void *idle(void *arg) { (void)arg; for (;;) pause(); return 0; }\n"
        "__attribute__((constructor)) static void start(void) {\n"
        "  pthread_t t; pthread_create(&t, 0, idle, 0); }\n")
    lib = tmp_path / "libthreaded.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-pthread", "-o", str(lib), str(source)],
                   check=True)
    return lib


def test_a_library_that_starts_a_thread_makes_the_server_refuse(native, server_env, tmp_path):
    """fork() copies one thread: a library that starts one at load time would leave its forks
    with a missing thread and possibly its locks held. The server counts its threads after
    loading and refuses to serve, naming the count."""
    lib = threaded_library(tmp_path)
    with pytest.raises(ForkServerError, match=r"not safe to fork: 2 threads"):
        ForkServer(native.binary, [str(lib)], server_env)


def test_the_python_runner_forks_too(hil_session, compiled_model, tmp_path):
    """The pybindings runner has a fork server of its own (harness/runner/python_fork_server.py):
    one thread once torch and the pybindings are loaded (OpenBLAS's server thread is not
    started), and every scenario a fork with an empty delegate cache: S1's bug shows in each
    fork exactly as in a process."""
    model = compiled_model("linear_relu")
    device = SimulatorDevice(hil_session.sdk, hil_session.soc, choose_runner("python"),
                             isolation="fork")
    try:
        assert device.isolation == "fork" and not device.isolation_notice
        driver = ScenarioDriver(device, tmp_path / "runs", 300)
        runs = [driver.run(s1_two_modules(model, "A"), allow_crash=True) for _ in range(2)]
        for result in runs:
            assert result.completed, result.crash_report()
            assert [s.status for s in result.steps][:6] == ["ok"] * 5 + ["error"]
            assert "DelegateHandle has been deleted" in result.output.stderr
            created = [r for r in result.trace if r.kind == "context_create"]
            assert len(created) == 1  # its own context: the cache starts empty in each fork
        [(_, pool)] = device._pools.values()
        [server] = pool._all
        assert server.threads == 1
        pids = {json.loads(line.split(" ", 1)[1])["pid"] for r in runs
                for line in r.output.stdout.splitlines() if '"start"' in line}
        assert len(pids) == 2 and server.proc.pid not in pids  # a fork per scenario
    finally:
        device.close()


def test_the_python_forks_report_every_memory_field_a_process_reports(hil_session,
                                                                    compiled_model, tmp_path):
    """The Python server collapses its anonymous memory into huge pages before serving (its
    `ready` line says how much) so that a fork's per-step readings cost less; every step of a
    fork still reports the rollup fields, mappings and dma-buf reading a new process reports
    (S4's growth check on them runs in tests/hil/test_isolation.py)."""
    runner = choose_runner("python")
    proc = subprocess.Popen(runner.fork_server_command(), env={**os.environ,
                            **runner.environment()}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(60)
    assert ready["threads"] == 1 and ready["huge_pages_kb"] >= 0, ready
    model = compiled_model("linear_relu")
    scenario = s4_cleanup_reload(model)
    results = {}
    for iso in ("fork", "process"):
        device = SimulatorDevice(hil_session.sdk, hil_session.soc, runner, isolation=iso)
        try:
            results[iso] = ScenarioDriver(device, tmp_path / iso, 300).run(scenario)
        finally:
            device.close()
    for iso, result in results.items():
        assert result.completed, result.crash_report()
        for step in result.steps:
            assert set(step.memory) == {"rollup", "mappings", "dmabuf", "heap"}, (iso, step.memory)
            assert step.memory["rollup"]["Rss"] > 0
    fork, process = results["fork"], results["process"]
    for a, b in zip(fork.steps, process.steps):
        assert set(a.memory["rollup"]) == set(b.memory["rollup"])
        assert set(a.memory["dmabuf"]) == set(b.memory["dmabuf"])


def test_the_python_fork_server_refuses_to_fork_with_a_second_thread(tmp_path, hil_session):
    lib = threaded_library(tmp_path)
    runner = choose_runner("python")
    env = {**os.environ, **runner.environment()}
    with pytest.raises(ForkServerError, match=r"not safe to fork: 2 threads"):
        ForkServer(runner.fork_server_command(), [str(lib)], env)
