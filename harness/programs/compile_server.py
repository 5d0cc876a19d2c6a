"""A fork server for model compiles: one process imports torch, ExecuTorch and its lowering
code once, then forks a child per compile that runs `compile_worker.main` as a fresh
`python -m harness.programs.compile_worker` would.

Why: importing the lowering stack takes about 6 of the 10 s a small model's compile takes on
the reference 2-core host, and a cold run compiles a few dozen programs. Each child starts from
a process that has only imported libraries and read the host facts they cache (HOST_FACTS;
no model built, nothing lowered), the state a new process has after the same imports, so a
compile's output does not depend on the ones before it. The server runs with the environment
of the compiles it serves (the QNN libraries must be on LD_LIBRARY_PATH when a process
starts), so there is one server per environment, but for the variables in PER_REQUEST: pytest
sets PYTEST_CURRENT_TEST anew for each test and no preloaded module reads it, so each child is
given the request's value before it compiles. Keyed by the whole environment, every test that
compiled started a server of its own (about 6 s of CPU each, its imports and one cpuinfo
run; a cold test run's process accounting counted 21 servers for 47 compiles, 14 after). A
test with a harness cache of its own still gets a server of its own: the QNN libraries on
LD_LIBRARY_PATH are laid out under that cache.

Protocol (text lines): the server prints READY once imported; each request is a JSON line
{"argv": [...compile_worker arguments], "log": path, "env": {PER_REQUEST name: value}}; the
child writes its stdout and stderr to `log`; the server answers `EXIT <code>` when the child
ends. A server that cannot start or dies is not an error here: the caller compiles in a new
process instead, which reports what is wrong.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

READY = "@@compile-server-ready"
EXIT = "@@compile-exit "
START_TIMEOUT_S = 300

# What a compile imports, imported once by the server; one that a runtime lacks is imported,
# and fails, in the child that needs it.
PRELOAD = ("torch", "executorch.exir", "executorch.backends.qualcomm.utils.utils",
           "executorch.backends.qualcomm.quantizer.quantizer",
           "executorch.backends.qualcomm.serialization.qc_schema_serialize",
           "executorch.backends.xnnpack.partition.xnnpack_partitioner",
           "torchao.quantization.pt2e.quantize_pt2e", "harness.protocol.tensors")

# Facts about the host that the lowering reads once per process, at the cost of a subprocess,
# read once by the server so that no compile child pays for them: (module, function). The QNN
# lowering asks py-cpuinfo for the CPU vendor (its AMD MKLDNN guard), which runs
# `python cpuinfo.py --json`: 1.1 s of CPU in every child (47 compiles in a cold test run).
# The function only caches the vendor; the torch setting it guards is still made by the
# lowering, in the child, as in a new process. One a runtime lacks is skipped.
HOST_FACTS = (("executorch.backends.qualcomm.utils.qnn_sdk_setup", "_host_is_amd"),)

# Environment variables a server is shared across: each request carries their values, set in
# the child before the compile (absent ones removed), as a new process would have them.
PER_REQUEST = ("PYTEST_CURRENT_TEST",)


def serve() -> int:
    """The server's loop: preload, say READY, fork a compile per request line."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the child that needs it reports the failure
            pass
    for module, function in HOST_FACTS:
        try:
            getattr(importlib.import_module(module), function)()
        except Exception:  # noqa: BLE001 - the child reads it itself, as a new process does
            pass
    from harness.programs.compile_worker import main

    out = sys.stdout
    print(READY, file=out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                for name in PER_REQUEST:
                    os.environ.pop(name, None)
                os.environ.update(request.get("env", {}))
                code = main(request["argv"])
            except SystemExit as exc:
                if isinstance(exc.code, int):
                    code = exc.code
                else:
                    print(exc.code, file=sys.stderr)
            except BaseException:  # noqa: BLE001 - reported in the log, like a child's traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(f"{EXIT}{os.waitstatus_to_exitcode(status)}", file=out, flush=True)
    return 0


class CompileServer:
    """The client side: one server process for one environment."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.programs.compile_server"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, start_new_session=True)
        self.ready = self._read_marker(READY, START_TIMEOUT_S) is not None

    def _read_marker(self, marker: str, timeout: float) -> str | None:
        """The rest of the first line starting with `marker`; None on timeout or EOF."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            line = self.proc.stdout.readline()
            if not line:
                return None
            if line.startswith(marker):
                return line[len(marker):].strip()

    def compile(self, argv: list[str], log: Path, timeout: float,
                env: dict[str, str] | None = None) -> int | None:
        """The compile's exit code; None if the server is gone (compile in a new process).
        `env`: the PER_REQUEST variables of the compile's environment. Raises TimeoutError,
        with the server and its child killed, after `timeout` s."""
        if not self.ready or self.proc.poll() is not None:
            return None
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "log": str(log),
                                              "env": env or {}}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        answer = self._read_marker(EXIT, timeout)
        if answer is None:
            alive = self.proc.poll() is None
            self.close()
            if alive:
                raise TimeoutError(f"compile did not finish in {timeout:.0f} s")
            return None
        return int(answer)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.ready = False


_servers: dict[tuple, CompileServer] = {}
_lock = threading.Lock()


def compile_in_server(env: dict[str, str], argv: list[str], log: Path,
                      timeout: float) -> int | None:
    """Run one compile (compile_worker's `argv`) in this environment's fork server, started on
    first use; its exit code, or None when no server runs (the caller starts a process).
    EXECUTORCH_HIL_COMPILE_SERVER=0 turns the servers off."""
    if env.get("EXECUTORCH_HIL_COMPILE_SERVER", "1") == "0" or not hasattr(os, "fork"):
        return None
    key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_REQUEST))
    per_request = {k: env[k] for k in PER_REQUEST if k in env}
    with _lock:
        server = _servers.get(key)
        if server is None:  # one that failed to start or timed out is not tried again
            server = _servers[key] = CompileServer(env)
        return server.compile(argv, log, timeout, per_request)


@atexit.register
def _close_all() -> None:
    for server in _servers.values():
        server.close()


if __name__ == "__main__":
    sys.exit(serve())
