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

What a child inherits costs it at every step: the runner reads `/proc/self/smaps_rollup` after
each one (as the native runner does), and to write it the kernel visits every page the process
maps, each page it shares with the server at a cost of its own (its share of Pss). After
`import torch` the server holds about 160 MB of anonymous memory (the malloc heap, Python's
arenas), 40000 4 kB pages, and a child's reading took 5-10 ms a step, under 1 ms in the native
runner's 20 MB child. So before serving, the server (1) collects and freezes its objects
(`gc.freeze()`: a child's collections skip them rather than write to each and copy its page;
what is frozen is never collected, and a child lives for one scenario), (2) imports what a
child would import per scenario, and (3) collapses its anonymous memory into 2 MB pages
(`madvise(MADV_COLLAPSE)`, Linux 6.1 on, where transparent huge pages are not `never`), only
the 2 MB ranges already nearly all resident (at most 1/8 of such a range is zero-filled memory
the collapse adds). A child shares those pages until it writes to one, which splits it into
4 kB entries again; the fork copies an entry per 2 MB and the rollup walks one (160 MB shared
with a parent, measured in a bare process: 7-9 ms a reading as 4 kB pages, 3 ms as 2 MB
pages). What a reading reports is still the whole process as the kernel counts it (a huge page
shows in `AnonHugePages` too), and what the runtime allocates in a child is unchanged: the
mappings keep their flags, so new memory comes in 4 kB pages as before.
"""

from __future__ import annotations

import ctypes
import gc
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


MADV_COLLAPSE = 25  # linux/mman.h, Linux 6.1
MIN_RESIDENT = 7 / 8  # of a range's pages: the rest is zero-filled memory a collapse adds


def huge_page_size() -> int:
    """The kernel's PMD-mapped huge page size (2 MB with 4 kB pages), 0 without THP."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 0


def anonymous_ranges() -> list[tuple[int, int]]:
    """The private writable anonymous mappings (and the malloc heap) of this process."""
    ranges = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            fields = line.split()
            if fields[1] == "rw-p" and (len(fields) == 5 or fields[5] == "[heap]"):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def collapse_to_huge_pages(ranges: list[tuple[int, int]]) -> int:
    """Collapse each huge-page-aligned range of `ranges` with at least MIN_RESIDENT of its pages
    resident into a huge page; the kB of the calls that succeeded. None does where the kernel
    cannot (before 6.1, or transparent huge pages `never`: EINVAL), nor in a mapping that opted
    out."""
    huge = huge_page_size()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise, mincore = libc.madvise, libc.mincore
    except (OSError, AttributeError):
        return 0
    if not huge:
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    pages = huge // os.sysconf("SC_PAGE_SIZE")
    resident = ctypes.create_string_buffer(pages)
    runs: list[list[int]] = []  # [start, end) of adjacent ranges that qualify: one call each
    for start, end in ranges:
        first = -(-start // huge) * huge
        for address in range(first, end - huge + 1, huge):
            if mincore(address, huge, resident) != 0 or \
                    sum(b & 1 for b in resident.raw) < MIN_RESIDENT * pages:
                continue
            if runs and runs[-1][1] == address:
                runs[-1][1] += huge
            else:
                runs.append([address, address + huge])
    collapsed = 0
    for start, end in runs:  # a call that fails part-way has collapsed what it could
        if madvise(start, end - start, MADV_COLLAPSE) == 0:
            collapsed += (end - start) >> 10
    return collapsed


def prepare_to_fork() -> dict:
    """What makes a child's steps cheap (the module's docstring): frozen objects, the child's
    imports done, huge pages. Returns what it did, for the ready message."""
    import harness.protocol.tensors  # noqa: F401  (what Runner.array / tensor import per scenario)

    gc.collect()
    gc.freeze()
    return {"huge_pages_kb": collapse_to_huge_pages(anonymous_ranges())}


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
    if len(names) == 1:
        ready.update(prepare_to_fork())
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
