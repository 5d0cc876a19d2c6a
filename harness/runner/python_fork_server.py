"""The Python runner's fork server: the native server's protocol (harness/runner/fork_server.py)
for runtimes that ship only the pybindings (executorch 1.4.x).

`python -m harness.runner.python_fork_server [--preload LIB ...]` imports torch and the
pybindings once (about 2 s, nearly all of a Python runner's cost per scenario), loads the QNN
libraries, creates nothing, and forks a child per request that runs the scenario with
`harness.runner.python_runner.Runner`; each child starts with an empty delegate cache.

Forking is sound only with one thread. After `import torch` a process has two: the second is
OpenBLAS's `blas_thread_server` (numpy's bundled libscipy_openblas, which torch imports; seen
with gdb, waiting on its condition variable), a worker pool that OpenBLAS starts at load with
one thread per extra core. A fork would copy none of its threads and could copy its lock held.
The server is started with `OPENBLAS_NUM_THREADS=1` (the runner does no BLAS work worth a
pool), so OpenBLAS starts no thread, and it checks rather than assumes: like the native server
it refuses to serve when more than one thread is left after loading, naming them.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

SINGLE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1"}
"""What a forking Python runner needs in its environment before it starts."""


def threads() -> list[str]:
    """The names of this process's threads."""
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                names.append(f"{tid} {fh.read().strip()}")
        except OSError:
            names.append(tid)
    return names


_REPLIES = [1]  # the fd replies go to: the server's stdout, which nothing else may write


def _reply(message: dict) -> None:
    os.write(_REPLIES[0], (json.dumps(message) + "\n").encode())


def _child(request: dict) -> int:
    """In the fork: the scenario's own stdout, stderr, environment and process group."""
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(request.get("env") or {})
    from harness.runner.python_runner import main

    try:
        return int(main([request["scenario"]]))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(preload: list[str]) -> int:
    # The libraries print to stdout as they load (QAIRT's "LIBNATIVE: ..." line): stdout is
    # kept for replies and fd 1 points at the log (stderr) until a child takes its own.
    _REPLIES[0] = os.dup(1)
    os.dup2(2, 1)
    import harness.protocol.memory  # noqa: F401
    from harness.runner.python_runner import pybindings

    pybindings()  # torch and the runtime's extension: what every scenario needs, loaded once

    for lib in preload:
        ctypes.CDLL(lib, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    names = threads()
    ready = {"ready": os.getpid(), "threads": len(names), "preloaded": preload,
             "runner": "python"}
    if len(names) != 1:
        ready["error"] = (f"not safe to fork: {len(names)} threads after loading the libraries "
                          f"({', '.join(names)}); fork copies only one")
        _reply(ready)
        return 2
    _reply(ready)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                os.close(_REPLIES[0])
                code = _child(request)
            finally:
                os._exit(code)
        _reply({"child": pid})
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            _reply({"done": pid, "signal": os.WTERMSIG(status)})
        else:
            _reply({"done": pid, "exit": os.WEXITSTATUS(status)})


def main(argv: list[str]) -> int:
    preload, args = [], list(argv)
    while args:
        flag = args.pop(0)
        if flag == "--serve":
            continue
        if flag == "--preload" and args:
            preload.append(args.pop(0))
            continue
        print(f"usage: python -m harness.runner.python_fork_server [--preload LIB ...] "
              f"(not {flag!r})", file=sys.stderr)
        return 2
    return serve(preload)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
