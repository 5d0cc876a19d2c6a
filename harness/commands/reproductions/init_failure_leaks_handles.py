"""A QNN delegate whose init fails keeps its QNN backend and device alive for the process.

    python init_failure_leaks_handles.py            # exit 1 while the bug is present
    python init_failure_leaks_handles.py --control  # the good program alone: must exit 0

Loads `forward` of a program whose QNN context binary is damaged (the QNN library refuses it:
"Failed to interpret QNN context binary", "Fail to initialize Qnn Manager"), then loads,
executes and destroys the good program, leaving nothing live. At that full teardown the
runtime must destroy the QNN context, device and backend ("Destroy Qnn device", "Destroy Qnn
backend", as the control does). With the bug, the good program reuses the bundle the failed
init left ("Use cached backend bundle for current backend") and only its context is destroyed:
QnnExecuTorchBackend::init returns after InitBackend / InitContext fail without destroying the
placement-new'd QnnManager, which keeps the backend bundle.
"""

import gc
import sys

from common import child, inputs, lines_with, program, pybindings, report, signal_name


def run(mode: str) -> None:
    C = pybindings()
    if mode == "damaged-first":
        try:
            C._load_program(program("linear_relu_damaged")).load_method("forward")
            print("the damaged program loaded", flush=True)
            sys.exit(4)
        except RuntimeError as exc:
            print(f"damaged program refused: {exc}", flush=True)
        gc.collect()
    print("=== the good program", file=sys.stderr, flush=True)
    p = C._load_program(program("linear_relu"))
    m = p.load_method("forward")
    m.call(inputs("linear_relu"))
    del m, p
    gc.collect()
    print("=== every module destroyed", file=sys.stderr, flush=True)
    sys.exit(0)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(sys.argv[2])
    control = "--control" in sys.argv
    status, out, err = child("good-only" if control else "damaged-first")
    if status != 0:
        print(f"could not tell: the child ended with {signal_name(status)}:\n{out}\n{err[-3000:]}")
        return 2
    teardown = err.split("=== the good program", 1)[-1]
    freed = "Destroy Qnn backend" in teardown and "Destroy Qnn device" in teardown
    words = lines_with(err, "Failed to interpret", "Fail to initialize", "backend bundle",
                       "Destroy Qnn")
    return report(not freed, "after every module is destroyed, the runtime destroys the QNN "
                  "context, device and backend (\"Destroy Qnn device\", \"Destroy Qnn backend\")",
                  "only the context is destroyed: the backend and device the failed init created "
                  "stay alive" if not freed else "context, device and backend destroyed", words)


if __name__ == "__main__":
    sys.exit(main())
