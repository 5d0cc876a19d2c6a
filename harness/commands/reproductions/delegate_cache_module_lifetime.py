"""Two Modules of one .pte share one cached QNN context; destroying the first breaks the second.

    python delegate_cache_module_lifetime.py          # the bug: exit 1 while it is present
    python delegate_cache_module_lifetime.py --control  # two different programs: must exit 0

Loads the program twice (two `_load_program` objects, as two apps' Modules would), loads and
executes `forward` on both, destroys the first, and executes the second again. The second
must give the same outputs as before; with the delegate cache keyed by the context signature
alone, it runs on the first one's context, which the first's destroy freed.
"""

import gc
import sys

from common import child, inputs, lines_with, program, pybindings, report, signal_name


def run(first: str, second: str) -> None:
    C = pybindings()
    a, b = C._load_program(program(first)), C._load_program(program(second))
    fa, fb = a.load_method("forward"), b.load_method("forward")
    x_a, x_b = inputs(first), inputs(second)
    fa.call(x_a)
    before = [t.clone() for t in fb.call(x_b)]
    del fa, a
    gc.collect()
    print("destroyed the first module", flush=True)
    after = fb.call(x_b)
    same = all(bool((p == q).all()) for p, q in zip(before, after))
    print("second module's outputs after the destroy: " + ("unchanged" if same else "CHANGED"),
          flush=True)
    sys.exit(0 if same else 3)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(*sys.argv[3:5])
    control = "--control" in sys.argv
    first, second = ("linear_relu", "mlp_tanh") if control else ("linear_relu", "linear_relu")
    status, out, err = child("run", first, second)
    words = lines_with(err, "DelegateHandle has been deleted", "CALL_DELEGATE execute failed",
                       "Use cached delegate handle")
    ok = status == 0 and "unchanged" in out
    bug = not ok and "destroyed the first module" in out and "DelegateHandle has been deleted" in err
    if not ok and not bug:
        print(f"could not tell: the child ended with {signal_name(status)} before or apart from "
              f"the bug:\n{out}\n{err[-3000:]}")
        return 2
    return report(bug, f"after destroying module A ({first}.pte), module B ({second}.pte) "
                  "still executes forward with the same outputs",
                  "B's execute fails: Error::Internal, 'DelegateHandle has been deleted'" if bug
                  else "B executes with the same outputs", words)


if __name__ == "__main__":
    sys.exit(main())
