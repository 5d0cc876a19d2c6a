"""QnnExecuTorchBackend reads its delegate maps without the mutex its writers hold: a data race
between any two Modules on two threads, whatever programs they load (helgrind).

    python delegate_maps_read_unlocked.py            # exit 1 while the race is there
    python delegate_maps_read_unlocked.py --control  # the same steps ordered by a lock: 0

The backend is one static object per process. add_cached_delegate (init) and
erase_cached_delegate (destroy) write delegate_map_ and delegate_map_rev_ under mutex_; init
reads delegate_map_ (find) and execute and destroy read delegate_map_rev_ (count) with no lock
(backends/qualcomm/runtime/QnnExecuTorchBackend.cpp, main cff6f4dd32e6, lines 84, 129, 194
against 334-351).

The C++ program (cpp/module_repro.cpp, `handoff`) runs Module A (linear_relu) and Module B
(mlp_tanh, another program: no delegate is shared, so this is not the delegate cache) on two
threads, one step after the other: A loads and executes; B loads and executes; A is destroyed;
B executes again and is destroyed. Each hand-off is a relaxed atomic flag, which orders nothing
(C++ [intro.races]: no happens-before), so the only order between the two threads' uses of the
backend's maps is the runtime's own locking; valgrind's helgrind then reports each read of a
map the other thread wrote as "Possible data race": B's execute and destroy reading
delegate_map_rev_ (count) against A's destroy writing it (erase, under mutex_), A's destroy
against B's init writing it (operator[], under mutex_). The address is in the BSS of
libexecutorch_backend_qnn.so, 152 and 160 bytes past the lock the writer held (mutex_ is the
object's first member; delegate_map_rev_ starts 136 bytes after it). The control hands off
under a mutex and condition variable, as an app that orders its Modules itself would: no race.
valgrind is a system package (apt-get install valgrind); about a minute a run.
"""

import re
import sys

from common import describe_error, input_file, program, report, valgrind

OWN = "[libexecutorch_backend_qnn.so]"
RUNTIME_STEPS = ("executorch::runtime::BackendDelegate::Init", "executorch::runtime::Method::execute",
                 "executorch::runtime::Method::~Method", "executorch::runtime::Method::execute_instruction")


def in_backend(stack: list[str]) -> bool:
    """The access is the QNN backend's own code (its first frames, before ExecuTorch's), under
    one of the runtime's calls into the backend (init, execute, destroy)."""
    own = [f for f in stack[:4] if not f.startswith("std::")]
    return bool(own) and own[0].endswith(OWN) and any(f.startswith(RUNTIME_STEPS) for f in stack)


def is_the_race(error: dict) -> bool:
    if error["kind"] != "Race" or len(error["parts"]) < 2:
        return False
    mine, other = error["parts"][0][1], error["parts"][1][1]
    where = " ".join(w for w, _ in error["parts"])
    return (in_backend(mine) and in_backend(other) and
            "is in the BSS segment of" in where and "libexecutorch_backend_qnn.so" in where)


def main() -> int:
    mode = "locked" if "--control" in sys.argv else "relaxed"
    status, out, errors = valgrind("helgrind", "handoff", program("linear_relu"),
                                   input_file("linear_relu"), program("mlp_tanh"),
                                   input_file("mlp_tanh"), mode)
    steps = [l for l in out.splitlines() if l.endswith((": ok", ": failed"))]
    if status != 0 or len(steps) != 4 or any(l.endswith("failed") for l in steps):
        print(f"could not tell: the two Modules did not run their steps:\n{out[-3000:]}")
        return 2
    races = [e for e in errors if is_the_race(e)]
    addresses = sorted({m.group(1) for e in races
                        for m in [re.search(r"at (0x[0-9A-Fa-f]+)", e["what"])] if m})
    shown = (f"{len(races)} data race(s) in libexecutorch_backend_qnn.so's static data (the "
             f"backend object) at {', '.join(addresses) or '-'}, between the runtime's init, "
             f"execute and destroy calls of Modules of two different programs ({mode} hand-offs)")
    for error in races:
        print("helgrind's report:\n" + describe_error(error, 8))
    return report(bool(races), "helgrind reports no race on the QNN backend's own state between "
                  "two Modules on two threads", shown)


if __name__ == "__main__":
    sys.exit(main())
