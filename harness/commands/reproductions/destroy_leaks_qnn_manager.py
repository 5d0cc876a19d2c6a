"""Every load -> execute -> destroy of a QNN program keeps malloc'd memory.

    python destroy_leaks_qnn_manager.py            # exit 1 while the bug is present
    python destroy_leaks_qnn_manager.py --control  # an XNNPACK program: must exit 0

Runs CYCLES load -> execute -> destroy cycles in one process, nothing live between them, and
reads malloc's bytes in use (glibc mallinfo2().uordblks, through ctypes) after each. The growth
per cycle is the median of the per-cycle differences after WARMUP cycles; QnnExecuTorchBackend
::destroy calls QnnManager::Destroy() but never ~QnnManager(), so the manager's maps, strings
and tensor wrappers stay allocated (about 1.9 kB a cycle on 1.5.1).
"""

import ctypes
import gc
import statistics
import sys

from common import child, inputs, program, pybindings, report, signal_name

CYCLES, WARMUP, BOUND = 40, 5, 512  # bytes per cycle


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]


def in_use() -> int:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    return int(libc.mallinfo2().uordblks)


def run(name: str) -> None:
    C = pybindings()
    x = inputs(name)
    readings = []
    for _ in range(CYCLES):
        p = C._load_program(program(name))
        m = p.load_method("forward")
        m.call(x)
        del m, p
        gc.collect()
        readings.append(in_use())
    diffs = [b - a for a, b in zip(readings[WARMUP:], readings[WARMUP + 1:])]
    print(f"malloc in use grows {statistics.median(diffs):+.0f} B/cycle (median of "
          f"{len(diffs)} cycles; first {readings[WARMUP]}, last {readings[-1]} B)", flush=True)
    sys.exit(3 if statistics.median(diffs) > BOUND else 0)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(sys.argv[3])
    name = "xnn_linear_stack" if "--control" in sys.argv else "linear_relu"
    status, out, err = child("cycles", name)
    if status not in (0, 3):
        print(f"could not tell: the child ended with {signal_name(status)}:\n{out}\n{err[-3000:]}")
        return 2
    return report(status == 3, f"{name}.pte: malloc's bytes in use do not grow per load -> "
                  f"execute -> destroy cycle (at most {BOUND} B/cycle)", out.strip())


if __name__ == "__main__":
    sys.exit(main())
