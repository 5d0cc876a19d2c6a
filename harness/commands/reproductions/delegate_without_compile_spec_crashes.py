"""A QNN delegate whose compile specs hold no `qnn_compile_spec` crashes the process with a null
dereference in the QNN backend's init instead of being refused.

    python delegate_without_compile_spec_crashes.py            # exit 1 while the bug is present
    python delegate_without_compile_spec_crashes.py --control  # the same program intact: 0

QnnExecuTorchBackend::init looks for the compile spec named `qnn_compile_spec` among the
delegate's compile specs, logs "unknown argument: <key>" for any other, and then constructs its
QnnManager with the options pointer it found, which stays nullptr when there is none
(backends/qualcomm/runtime/QnnExecuTorchBackend.cpp, init, lines 41 and 60-77, main
cff6f4dd32e6); QnnManager::QnnManager reads `options->backend_options()` first thing
(backends/qualcomm/runtime/QnnManager.cpp, lines 53-58). No QNN call happens before it.

programs/linear_relu_no_spec.pte is linear_relu with the key renamed `xnn_compile_spec` (the
same length, so the program is otherwise valid: export.py makes it). The C++ program
(cpp/module_repro.cpp, executorch's Module) loads it and executes `forward`; a fixed runtime
refuses the method with an error ("execute(forward) failed with error 0x..."). With the bug the
process dies with SIGSEGV, its frames (glibc backtrace) inside libexecutorch_backend_qnn.so
right under executorch::runtime::BackendDelegate::Init, after the backend's "unknown argument:
xnn_compile_spec" and before any QNN backend is created. The control runs the intact program.
"""

import sys

from common import input_file, native, program, report, signal_name

INIT = "_ZN10executorch7runtime15BackendDelegate4Init"  # BackendDelegate::Init, as glibc prints it


def crash_frames(err: str) -> list[str]:
    """The crashing thread's frames module_repro printed (glibc's backtrace_symbols_fd lines),
    from the first one after its handler's own."""
    frames = [l.strip() for l in err.splitlines() if "(" in l and ")[0x" in l]
    return [f for f in frames if "module_repro" not in f.split("(")[0] and "libc.so" not in f
            .split("(")[0]]


def main() -> int:
    name = "linear_relu" if "--control" in sys.argv else "linear_relu_no_spec"
    status, out, err = native("execute-once", program(name), input_file(name))
    if status == 0 and "forward:" in out:
        return report(False, f"{name}: refused with an error or executed", "executed")
    if status == 2 and "execute(forward) failed with error" in out:
        return report(False, f"{name}: refused with an error", out.strip().splitlines()[-1])
    frames = crash_frames(err)
    first = frames[:3]
    at_init = (len(first) >= 2 and all("libexecutorch_backend_qnn.so" in f for f in first[:-1])
               and any(INIT in f for f in frames[:4]))
    unknown = "unknown argument: xnn_compile_spec" in err
    before_qnn = "Creating new backend bundle" not in err
    if status == -11 and at_init and unknown and before_qnn:
        return report(True, f"{name}: a delegate without its compile spec is refused with an "
                      "error", "SIGSEGV inside libexecutorch_backend_qnn.so under "
                      "BackendDelegate::Init, before any QNN call",
                      "\n".join(l for l in err.splitlines() if "unknown argument" in l or
                                l.startswith("FATAL")) + "\n" + "\n".join(frames[:4]))
    print(f"could not tell: module_repro ended with {signal_name(status)}:\n{out[-2000:]}\n"
          f"{err[-3000:]}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
