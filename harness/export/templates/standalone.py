"""@@TITLE@@

Exported by executorch-qnn-hil (`python -m harness export --format python`) from the run
@@SOURCE@@

Scenario: @@SCENARIO@@
Ordering: @@ORDERING@@

What the framework asserted, and this test asserts again:
 - every step succeeds@@ALLOWED@@ (a parallel step's sub-steps run on one thread
   each, released together);
 - every execute's outputs equal the reference (|out - exp| <= atol + rtol * |exp|) and are
   identical to the first execute of the same program's method in this run;
 - with the QNN call trace interposer preloaded (HARNESS_QNN_TRACE names its trace file), the
   live QNN contexts after each step are one per live module with a loaded method of a QNN
   program (the reference model's count: modules never share a context).
Modules are `_load_program` objects and methods the method objects this script holds itself
(`executorch.runtime.Program.load_method` caches methods for the program's lifetime, so it
could not unload one). A failing step does not stop the run: every step runs, each failure is
printed, and the exit status is 1 when any check failed, 0 when all held.

Usage: python3 this_file.py [DATA_DIR]   (the programs and tensors; default ./data)
"""

import os
import sys
import threading

import numpy as np
import torch  # noqa: F401  (tensors cross the pybindings as torch tensors)
from executorch.extension.pybindings import _C

DATA = sys.argv[1] if len(sys.argv) > 1 else "data"
failures = 0
where = ""
first_outputs = {}
lock = threading.Lock()  # the failures, shared by a parallel step's threads
local = threading.local()  # local.sub: the sub-step a parallel step's thread runs


def fail(what):
    global failures
    sub = getattr(local, "sub", "")
    with lock:
        failures += 1
        print(f"FAILED {where}{' / ' + sub if sub else ''}: {what}", flush=True)


def refuse(what, allowed):
    """A step the framework's runner refuses itself (a module that is not live, a method
    already loaded): a failure, unless the framework expects the step to fail."""
    if allowed:
        print(f"  {what} (allowed: the framework expects this step to fail)", flush=True)
    else:
        fail(what)


def parallel(subs):
    """One thread per sub-step, released together once every one has started, all joined
    (the pybindings hold the GIL while they run a call, so the calls themselves take turns)."""
    barrier = threading.Barrier(len(subs))

    def run(name, work):
        local.sub = name
        barrier.wait()
        work()

    threads = [threading.Thread(target=run, args=sub) for sub in subs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def begin(index, description):
    global where
    where = f"step {index} {description}"
    print(where, flush=True)


def live_contexts(trace):
    """Successful context creates minus frees in the interposer's trace; None when it has no
    QNN call yet (no interposer, or QNN not started)."""
    live, traced = 0, False
    if os.path.exists(trace):
        with open(trace) as f:
            for line in f:
                words = line.split()
                traced = traced or bool(words)
                if len(words) >= 3 and words[2] == "rc=0":
                    live += {"context_create": 1, "context_free": -1}.get(words[1], 0)
    return live if traced else None


def end(expected_contexts):
    trace = os.environ.get("HARNESS_QNN_TRACE")
    if not trace or expected_contexts < 0:
        return
    live = live_contexts(trace)
    if live is None:
        if expected_contexts > 0:
            print(f"  live QNN contexts: not checked (no QNN call in {trace}: the trace "
                  "interposer is not loaded)", flush=True)
        return
    print(f"  live QNN contexts: {live} (expected {expected_contexts})", flush=True)
    if live != expected_contexts:
        fail(f"{live} live QNN contexts, expected {expected_contexts} (one per live module "
             "with a loaded method: modules must not share a context)")


def tensor(spec):
    """A raw little-endian tensor file as a torch tensor; torch reads every dtype the
    harness writes (bfloat16 and the unsigned types included), numpy alone does not."""
    file, dtype, shape = spec
    with open(os.path.join(DATA, file), "rb") as handle:
        data = bytearray(handle.read())
    if not data:
        return torch.zeros(shape, dtype=getattr(torch, dtype))
    return torch.frombuffer(data, dtype=getattr(torch, dtype)).reshape(shape)


def attempt(call, what, allowed):
    """The call's value, or None when the runtime raised (its own words are on stderr)."""
    try:
        return call()
    except Exception as exc:  # the pybindings raise RuntimeError with the runtime's Error
        if allowed:
            print(f"  {what} raised (allowed: the framework expects this step to fail): {exc}")
        else:
            fail(f"{what} raised {type(exc).__name__}: {exc}")
        return None


modules = {}  # module name -> its _load_program object, while live
methods = {}  # module name -> {method name: the method object this script holds}, in load order


def live(module, allowed):
    if module not in modules:
        refuse(f"module {module} is not live", allowed)
    return module in modules


def load_module(module, program, load_mode, allowed):
    # The pybindings read a file only through MmapDataLoader (mlock where permitted): the
    # export refuses a run with any other load_mode.
    if module in modules:
        refuse(f"module {module} is already live", allowed)
        return
    loaded = attempt(lambda: _C._load_program(os.path.join(DATA, program)),
                     f"load_module({module})", allowed)
    if loaded is not None:
        modules[module], methods[module] = loaded, {}


def load_method(module, name, allowed):
    if not live(module, allowed):
        return
    if name in methods[module]:
        refuse(f"method {name} of module {module} is already loaded", allowed)
        return
    method = attempt(lambda: modules[module].load_method(name), f"load_method({name})", allowed)
    if method is not None:
        methods[module][name] = method


def unload_method(module, name, allowed):
    """Drops the method object: its delegate handles are destroyed, other methods stay."""
    if live(module, allowed) and methods[module].pop(name, None) is None:
        refuse(f"method {name} of module {module} is not loaded", allowed)


def destroy_module(module, allowed):
    """Every method object (in load order), then the module itself."""
    if live(module, allowed):
        methods.pop(module).clear()
        del modules[module]


def execute(module, program, name, inputs, expected, atol, rtol, allowed):
    if not live(module, allowed):
        return
    if name not in methods[module]:  # loaded first, as the framework's runner's execute does
        load_method(module, name, allowed)
        if name not in methods[module]:
            return
    method = methods[module][name]
    outputs = attempt(lambda: method.call([tensor(t) for t in inputs]), f"execute({name})",
                      allowed)
    if outputs is None:
        return
    if len(outputs) != len(expected):
        fail(f"returned {len(outputs)} outputs, expected {len(expected)}")
        return
    before = failures
    got = []
    for i, (out, spec) in enumerate(zip(outputs, expected)):
        out = out.detach().contiguous()
        got.append(out.reshape(-1).view(torch.uint8).numpy().tobytes() if out.numel() else b"")
        ref = tensor(spec).to(torch.float64).numpy()
        value = out.to(torch.float64).numpy()
        if value.shape != ref.shape or not np.all(np.abs(value - ref) <= atol + rtol * np.abs(ref)):
            worst = float(np.abs(value - ref).max()) if value.shape == ref.shape else float("nan")
            fail(f"output {i} differs from the reference beyond atol {atol} rtol {rtol} "
                 f"(max abs diff {worst})")
    key = f"{program}/{name}"
    if key in first_outputs and first_outputs[key] != got:
        fail(f"outputs differ from the first execute of {key} on the same inputs")
    first_outputs.setdefault(key, got)
    if failures == before:
        print("  outputs match the reference", flush=True)


def main():
    print("scenario @@SCENARIO@@", flush=True)
@@STEPS@@
    if failures:
        print(f"scenario @@SCENARIO@@: {failures} check(s) FAILED", flush=True)
        return 1
    print("scenario @@SCENARIO@@: every check held", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
