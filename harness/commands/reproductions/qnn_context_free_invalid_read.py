"""QAIRT 2.49's libQnnHtp.so reads a block inside QnnContext_free after freeing it (valgrind's
memcheck: "Invalid read of size 4").

    python qnn_context_free_invalid_read.py            # exit 1 while the bug is present
    python qnn_context_free_invalid_read.py --control  # an XNNPACK program, the same way: 0

The C++ program (cpp/module_repro.cpp, executorch's Module) loads a QNN program, executes
`forward` once and destroys the Module (the QNN backend's destroy: QnnContext_free, then the
device and the backend, in the order QNN's API asks for). Under memcheck the read is inside
libQnnHtp.so under QnnContext_free, of a 27,648-byte block (linear_relu, SM8650 fp16) that the
same call freed a few instructions earlier through gpe_delete, allocated by
hexagon_nn_deserialize_graph at QnnContext_createFromBinary. Both stacks are libQnnHtp's from
the QNN entry point down: no ExecuTorch frame stands between the free and the read, so it is the
library's own use-after-free, not the runtime's teardown order. Seen with QAIRT 2.49
(onnxruntime-qnn 2.5.0), not with 2.51 (onnxruntime-qnn 2.7.0).

The control runs an XNNPACK program through the same load, execute and destroy under the same
memcheck: no invalid read, so the tool, the program and the runtime's own code report none.
valgrind is a system package (apt-get install valgrind); about a minute a run.
"""

import sys

from common import describe_error, input_file, program, qnn_libraries, report, valgrind


def is_the_read(error: dict) -> bool:
    """An invalid read in libQnnHtp.so of a block freed by gpe_delete and allocated by
    hexagon_nn_deserialize_graph (both libQnnHtp's own exported functions)."""
    if error["kind"] != "InvalidRead" or not error["parts"]:
        return False
    stack = error["parts"][0][1]
    if not stack or not stack[0].endswith("[libQnnHtp.so]"):
        return False
    freed = [s for w, s in error["parts"] if "free'd" in w]
    allocated = [s for w, s in error["parts"] if "alloc'd" in w]
    return (bool(freed) and any(f.startswith("gpe_delete ") for f in freed[0]) and
            bool(allocated) and any(f.startswith("hexagon_nn_deserialize_graph ")
                                    for f in allocated[0]))


def main() -> int:
    name = "stateful_accumulator_xnn" if "--control" in sys.argv else "linear_relu"
    _status, out, errors = valgrind("memcheck", "execute-once", program(name), input_file(name))
    if "forward:" not in out:
        print(f"could not tell: the program did not execute under valgrind:\n{out[-3000:]}")
        return 2
    reads = [e for e in errors if is_the_read(e)]
    invalid = [e for e in errors if e["kind"].startswith("Invalid")]
    blocks = sorted({w.split(" bytes inside a block of size ")[1].split()[0]
                     for e in reads for w, _ in e["parts"] if "inside a block of size" in w})
    shown = (f"{len(reads)} invalid read(s) in libQnnHtp.so of a block freed by gpe_delete "
             f"(block size {', '.join(blocks) or '-'} bytes); {len(invalid)} invalid access(es) "
             f"in all; QNN libraries {qnn_libraries()}")
    for error in (reads or invalid)[:2]:
        print("memcheck's report:\n" + describe_error(error, 16))
    return report(bool(reads), f"{name}: load, execute, destroy under memcheck with no invalid "
                  "read", shown)


if __name__ == "__main__":
    sys.exit(main())
