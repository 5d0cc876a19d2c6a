"""Two Modules of one .pte share one QNN-delegated mutable buffer: the second continues the
first's state instead of starting from the program's initial state.

    python mutable_buffer_shared_across_modules.py            # exit 1 while the bug is present
    python mutable_buffer_shared_across_modules.py --control  # the XNNPACK build: must exit 0

The program is an accumulator (`acc.add_(x); return acc * 1.0`, a 16-float buffer). Module A
executes twice; module B is loaded from the same .pte and executes once. B's first output must
be A's first output (each Module starts from the program's state); with the delegate cache, B
runs on A's cached QnnManager and its buffer, so B's first output is A's third.
"""

import sys

from common import child, inputs, program, pybindings, report, signal_name


def run(name: str) -> None:
    C = pybindings()
    x = inputs(name)
    a = C._load_program(program(name))
    fa = a.load_method("forward")
    first = fa.call(x)[0].clone()
    fa.call(x)
    b = C._load_program(program(name))
    fb = b.load_method("forward")
    got = fb.call(x)[0]
    print(f"A execute 1: {first[:4].tolist()}", flush=True)
    print(f"B execute 1: {got[:4].tolist()}", flush=True)
    sys.exit(0 if bool((got == first).all()) else 3)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(sys.argv[3])
    name = "stateful_accumulator_xnn" if "--control" in sys.argv else "stateful_accumulator"
    status, out, err = child("run", name)
    if status not in (0, 3):
        print(f"could not tell: the child ended with {signal_name(status)}:\n{out}\n{err[-3000:]}")
        return 2
    bug = status == 3
    shown = " ".join(l for l in out.splitlines() if l.startswith(("A execute", "B execute")))
    return report(bug, f"module B, loaded from {name}.pte while A lives, starts from the "
                  "program's state: its first output equals A's first output",
                  f"B's first output differs from A's first ({shown})" if bug else shown,
                  "\n".join(l for l in err.splitlines() if "cached delegate" in l))


if __name__ == "__main__":
    sys.exit(main())
