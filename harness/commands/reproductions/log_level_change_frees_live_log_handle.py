"""A second program with another QNN log level frees the log handle the live backend and
device were created with.

    python log_level_change_frees_live_log_handle.py            # exit 1 while the bug is present
    python log_level_change_frees_live_log_handle.py --control  # one log level: must exit 0

Module A (linear_relu.pte, QNN log level kLogLevelError) loads and executes; module B
(mlp_tanh_debug.pte, built with kLogLevelDebug) loads and executes; A executes again; both are
destroyed. The evidence is a call sequence, so the child runs under gdb, which records the QNN
calls through the real library's function table (qnn_calls_gdb.py; no interposer): the log
handle 0x1 the backend and device were created with must not be freed before they are. The
runtime caches one backend bundle per backend type and, when a program's log level differs,
replaces the bundle's QnnLogger, whose destructor frees the handle. The control loads
mlp_tanh.pte at the same level as A.
"""

import gc
import re
import shutil
import subprocess
import sys

from common import HERE, inputs, program, pybindings, qnn_environment, report


def run(a: str, b: str) -> None:
    C = pybindings()
    pa = C._load_program(program(a))
    ma = pa.load_method("forward")
    ma.call(inputs(a))
    pb = C._load_program(program(b))
    mb = pb.load_method("forward")
    mb.call(inputs(b))
    ma.call(inputs(a))
    del ma, pa, mb, pb
    gc.collect()
    print("CHILD DONE", flush=True)
    sys.exit(0)


def freed_while_used(calls: list[tuple[str, int, int | None]]) -> list[str]:
    """Each log_free of a handle a live backend or device was created with."""
    live: dict[tuple[str, int], int] = {}  # (kind, handle) -> the log handle it was created with
    problems = []
    for name, arg, out in calls:
        kind, _, action = name.partition("_")
        if kind in ("backend", "device") and action == "create" and out:  # 0: it failed
            live[(kind, out)] = arg
        elif kind in ("backend", "device") and action == "free":
            live.pop((kind, arg), None)
        elif name == "log_free":
            users = [f"{k}#{h:#x}" for (k, h), log in live.items() if log == arg]
            if users:
                problems.append(f"log_free({arg:#x}) while {', '.join(users)} created with it live")
    return problems


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(*sys.argv[3:5])
    gdb = shutil.which("gdb")
    if gdb is None:
        print("cannot run: gdb is needed (the evidence is a call sequence)")
        return 2
    b = "mlp_tanh" if "--control" in sys.argv else "mlp_tanh_debug"
    # This interpreter as it was started (a venv's python, not the base one behind its link):
    # the child must import the executorch installed for it.
    proc = subprocess.run([gdb, "-q", "-batch", "-x", str(HERE / "qnn_calls_gdb.py"), "--args",
                           sys.executable, sys.argv[0], "--child", "run", "linear_relu", b],
                          capture_output=True, text=True, errors="replace", timeout=600,
                          env=qnn_environment())
    calls = []
    for line in proc.stdout.splitlines():
        m = re.match(r"QNNCALL (\w+) arg0=(0x[0-9a-f]+)(?: out=(0x[0-9a-f]+))?", line)
        if m:
            calls.append((m.group(1), int(m.group(2), 16), int(m.group(3), 16) if m.group(3) else None))
    if "CHILD DONE" not in proc.stdout or not any(n == "device_create" and o for n, _, o in calls):
        print("could not tell: the programs did not load and execute (or gdb recorded no QNN "
              f"device):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return 2
    problems = freed_while_used(calls)
    sequence = "\n".join(f"{n}({a:#x})" + (f" -> {o:#x}" if o is not None else "") for n, a, o in calls)
    levels = "\n".join(l for l in proc.stderr.splitlines() if "QNN Logger" in l or "backend bundle" in l)
    return report(bool(problems), "no log handle is freed while a backend or device created with "
                  "it is live", "; ".join(problems) or "every log handle outlived its users",
                  levels + "\nQNN calls (gdb):\n" + sequence)


if __name__ == "__main__":
    sys.exit(main())
