"""Destroying a second Module of the same .pte while the first executes breaks the first: a
crash, "DelegateHandle has been deleted", or QNN's "free in progress".

    python delegate_cache_destroy_during_execute.py            # exit 1 while the bug is present
    python delegate_cache_destroy_during_execute.py --control  # B of another program: exit 0

A C++ program on extension::Module (threads; the pybindings hold the GIL): A loads and
executes; 20 times, B loads and executes, then is destroyed while a thread executes A; A must
keep giving its first outputs. B's load found A's cached manager ("Use cached delegate handle
for current method: forward"), so B's destroy frees the context A executes on.

The bug's own signature, not any failure: A's execute fails with the runtime's words for a
freed handle ("DelegateHandle has been deleted", QNN's "free in progress"), or the process dies
once B's destroy has begun with the crashing thread's frames inside the QNN backend or library
(libexecutorch_backend_qnn.so, libQnn*.so; module_repro prints them). A crash elsewhere, or an
error without those words, is "could not tell" (exit 2).
"""

import re
import sys

from common import input_file, lines_with, native, program, report, signal_name

FREED = ("DelegateHandle has been deleted", "free in progress")
QNN_FRAME = re.compile(r"lib(executorch_backend_qnn|Qnn\w*)\.so")


def crash_signature(err: str) -> str:
    """The crash line and QNN frames when the crash is this defect's: once B's destroy began,
    inside the QNN backend or library; "" otherwise."""
    fatal = re.search(r"FATAL (\w+) thread=(.+?) phase=(during|after) B's destroy", err)
    if not fatal:
        return ""
    frames = [re.sub(r"^\S*/", "", line) for line in err[fatal.end():].splitlines()
              if QNN_FRAME.search(line)]  # the library's name, not where it is installed
    return "\n".join([fatal.group(0), *frames[:8]]) if frames else ""


def main() -> int:
    control = "--control" in sys.argv
    b = "mlp_tanh" if control else "linear_relu"
    status, out, err = native("destroy-during-execute", program("linear_relu"), program(b),
                              input_file("linear_relu"))
    words = lines_with(err + out, *FREED, "Use cached delegate handle", "failed with error")
    if status != 0 and "Use cached delegate handle" not in err:
        print(f"could not tell: A failed ({signal_name(status)}) but B never found A's cached "
              f"delegate (no \"Use cached delegate handle\"):\n{out}\n{err[-3000:]}")
        return 2
    if status < 0:
        crash = crash_signature(err)
        if not crash:
            print(f"could not tell: {signal_name(status)} outside the QNN backend or before B's "
                  f"destroy:\n{out}\n{err[-3000:]}")
            return 2
        return report(True, "A keeps executing while B is destroyed",
                      f"the process died of {signal_name(status)} in the QNN backend once B's "
                      "destroy began", words + "\n" + crash)
    if status == 1 and not any(w in err + out for w in FREED):
        print(f"could not tell: A's execute failed without the words of a freed handle:\n{out}\n"
              f"{err[-3000:]}")
        return 2
    if status not in (0, 1):
        print(f"could not tell: exit {status}:\n{out}\n{err[-3000:]}")
        return 2
    return report(status == 1, f"A (linear_relu.pte) keeps executing with its outputs while B "
                  f"({b}.pte) is destroyed", out.strip().splitlines()[-1], words)


if __name__ == "__main__":
    sys.exit(main())
