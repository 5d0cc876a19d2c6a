"""Destroying a second Module of the same .pte while the first executes breaks the first: a
crash, "DelegateHandle has been deleted", or QNN's "free in progress".

    python delegate_cache_destroy_during_execute.py            # exit 1 while the bug is present
    python delegate_cache_destroy_during_execute.py --control  # B of another program: exit 0

A C++ program on extension::Module (threads; the pybindings hold the GIL): A loads and
executes; 20 times, B loads and executes, then is destroyed while a thread executes A; A must
keep giving its first outputs. B's load found A's cached manager ("Use cached delegate handle
for current method: forward"), so B's destroy frees the context A executes on.
"""

import sys

from common import input_file, lines_with, native, program, report, signal_name


def main() -> int:
    control = "--control" in sys.argv
    b = "mlp_tanh" if control else "linear_relu"
    status, out, err = native("destroy-during-execute", program("linear_relu"), program(b),
                              input_file("linear_relu"))
    words = lines_with(err + out, "DelegateHandle has been deleted", "free in progress",
                       "Use cached delegate handle", "failed with error")
    if status < 0:
        return report(True, "A keeps executing while B is destroyed",
                      f"the process died of {signal_name(status)} during B's destroy", words)
    if status not in (0, 1):
        print(f"could not tell: exit {status}:\n{out}\n{err[-3000:]}")
        return 2
    return report(status == 1, f"A (linear_relu.pte) keeps executing with its outputs while B "
                  f"({b}.pte) is destroyed", out.strip().splitlines()[-1], words)


if __name__ == "__main__":
    sys.exit(main())
