"""QnnExecuTorchAllocCustomMem crashes the process on any platform but Android (a call through a
null function pointer) instead of returning null.

    python shared_buffer_alloc_calls_null_off_android.py            # exit 1 while the bug is present
    python shared_buffer_alloc_calls_null_off_android.py --control  # inputs on the heap: must exit 0

QnnExecuTorchAllocCustomMem is the QNN backend's public C API for shared (rpcmem) buffers
(backends/qualcomm/runtime/QnnExecuTorch.h), called here through ctypes from the library the
pybindings load. SharedBuffer::GetSharedBufferManager marks the manager initialized without
loading libcdsprpc.so off Android ("skip on all other platforms"), so AllocMem calls the
rpc_mem_alloc_ pointer that was never looked up. The control executes the same program with
its inputs on the heap.
"""

import ctypes
import sys
from pathlib import Path

from common import child, inputs, program, pybindings, report, signal_name


def backend_library() -> ctypes.CDLL:
    import executorch

    for base in executorch.__path__:
        path = Path(base) / "lib" / "libexecutorch_backend_qnn.so"
        if path.exists():
            return ctypes.CDLL(str(path))
    raise SystemExit("no lib/libexecutorch_backend_qnn.so in the executorch package")


def run(mode: str) -> None:
    C = pybindings()
    name = "linear_relu_shared_buffer"
    method = C._load_program(program(name)).load_method("forward")
    if mode == "heap":
        method.call(inputs(name))
        print("executed with inputs on the heap", flush=True)
        sys.exit(0)
    lib = backend_library()
    lib.QnnExecuTorchAllocCustomMem.restype = ctypes.c_void_p
    lib.QnnExecuTorchAllocCustomMem.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    print("calling QnnExecuTorchAllocCustomMem(64, 64)", flush=True)
    ptr = lib.QnnExecuTorchAllocCustomMem(64, 64)
    print(f"returned {ptr!r}", flush=True)
    sys.exit(0)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(sys.argv[2])
    control = "--control" in sys.argv
    status, out, err = child("heap" if control else "alloc")
    if status != 0 and not (status == -11 and "calling QnnExecuTorchAllocCustomMem" in out):
        print(f"could not tell: the child ended with {signal_name(status)}:\n{out}\n{err[-3000:]}")
        return 2
    bug = status == -11
    return report(bug, "QnnExecuTorchAllocCustomMem returns a buffer, or null where shared "
                  "memory is unavailable; the process goes on" if not control else
                  "the program executes with its inputs on the heap",
                  "the process died of SIGSEGV inside QnnExecuTorchAllocCustomMem" if bug
                  else out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
