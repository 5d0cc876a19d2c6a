"""An XNNPACK-delegated program whose weights live in an external .ptd file, loaded without that
file, crashes the process with a null dereference in the XNNPACK backend's init instead of being
refused with an error.

    python xnnpack_missing_external_data_crashes.py            # exit 1 while the bug is present
    python xnnpack_missing_external_data_crashes.py --control  # the same program with its .ptd: 0

models/linear_relu.py (Linear(16, 8) + ReLU) is lowered with executorch's public API: its
weights tagged for external data (`delegate_external_constants_pass_unlifted`, as the llama
export's external-weights option does), `to_edge_transform_and_lower` with the
XnnpackPartitioner, `to_executorch`; the program goes to linear_relu_xnn.pte and its weights to
linear_relu.ptd (`write_tensor_data_to_file`). It is then loaded without the .ptd twice: with
the Python API (`executorch.runtime.Runtime.load_program(pte)`, then `load_method("forward")`)
and with the C++ extension::Module (cpp/module_repro.cpp: `Module(pte)`, then `forward`). A
correct runtime refuses the method with an error, as it does for a program whose
non-delegated constants are external ("The named_data_map is null; most likely no external .ptd
file was provided", runtime/executor/tensor_parser_exec_aten.cpp). With the bug both processes
die with SIGSEGV: Method::init passes the XNNPACK backend a null NamedDataMap when the program
has no data of its own and none was given (runtime/executor/method.cpp, Method::init, lines
929-950, main cff6f4dd32e6), and getConstantDataPtr calls `named_data_map->get_data(...)`
without a null check (backends/xnnpack/runtime/XNNCompiler.cpp, getConstantDataPtr, line 256;
with the packed-weight cache on, XNNWeightsCache::load_unpacked_data, XNNWeightsCache.cpp line
247, the same). The C++ program's frames say where: getConstantDataPtr, under
XNNCompiler::compileModel, in libexecutorch_backend_xnnpack.so. No QNN library is involved.
The control loads the same two files together and executes: the Python API and the C++ Module
give the same outputs.
"""

import sys
from pathlib import Path

from common import HERE, child, lines_with, native, report, signal_name

TAG = "linear_relu"  # the .ptd's name: the weights' external tag
FRAMES = ("getConstantDataPtr", "XNNCompiler12compileModel")  # as glibc prints them (mangled)


def export(directory: str) -> None:
    """Lower models/linear_relu.py to XNNPACK with its weights tagged external; write the
    program, its .ptd and the input (raw float32) into `directory`."""
    import importlib.util

    import numpy as np
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import (
        delegate_external_constants_pass_unlifted,
    )

    spec = importlib.util.spec_from_file_location("model", HERE / "models" / "linear_relu.py")
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    module, inputs = model.build()["forward"]
    tagged = torch.export.export(module, inputs, strict=True).module()
    delegate_external_constants_pass_unlifted(module=tagged, gen_tag_fn=lambda node: TAG)
    exported = torch.export.export(tagged, inputs, strict=True)
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]) \
        .to_executorch()
    out = Path(directory)
    (out / "linear_relu_xnn.pte").write_bytes(program.buffer)
    program.write_tensor_data_to_file(str(out))
    if not (out / f"{TAG}.ptd").is_file():
        print(f"the lowering wrote no {TAG}.ptd: the weights are not external")
        sys.exit(2)
    (out / "linear_relu.bin").write_bytes(inputs[0].numpy().astype(np.float32).tobytes())
    print(f"exported: linear_relu_xnn.pte {len(program.buffer)} B, {TAG}.ptd "
          f"{(out / f'{TAG}.ptd').stat().st_size} B", flush=True)


def load(pte: str, ptd: str, raw: str) -> None:
    """The Python API: load the program (with the .ptd unless it is "-"), its method, execute."""
    import numpy as np
    import torch
    from executorch.runtime import Runtime

    runtime = Runtime.get()
    program = (runtime.load_program(pte) if ptd == "-" else
               runtime.load_program(pte, data_path=ptd))
    print("program loaded", flush=True)
    try:
        method = program.load_method("forward")
    except RuntimeError as error:  # a fixed runtime's refusal (the pybindings raise it)
        print(f"load_method(forward) refused: {type(error).__name__}: {error}", flush=True)
        sys.exit(3)
    print("method loaded", flush=True)
    x = torch.from_numpy(np.fromfile(raw, dtype=np.float32).reshape(1, -1))
    print("forward: " + " ".join(f"{v:.9g}" for v in method.execute([x])[0].flatten().tolist()),
          flush=True)
    sys.exit(0)


def crash_frames(err: str) -> list[str]:
    """The crashing thread's frames module_repro printed (glibc's backtrace_symbols_fd lines),
    from the first one after its handler's own."""
    frames = [l.strip() for l in err.splitlines() if "(" in l and ")[0x" in l]
    return [f for f in frames if "module_repro" not in f.split("(")[0] and "libc.so" not in f
            .split("(")[0]]


def forward_values(out: str) -> list[float]:
    line = next((l for l in out.splitlines() if l.startswith("forward:")), "")
    return [float(v) for v in line.split()[1:]]


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        if sys.argv[2] == "export":
            export(sys.argv[3])
            return 0
        load(*sys.argv[3:6])  # exits with its verdict
        return 2
    import tempfile

    control = "--control" in sys.argv
    with tempfile.TemporaryDirectory(prefix="xnn-external-") as directory:
        status, out, err = child("export", directory, timeout=900)
        if status != 0:
            print(f"could not lower the program ({signal_name(status)}):\n{out}\n{err[-3000:]}")
            return 2
        pte, raw = f"{directory}/linear_relu_xnn.pte", f"{directory}/linear_relu.bin"
        ptd = f"{directory}/{TAG}.ptd" if control else "-"
        py_status, py_out, py_err = child("load", pte, ptd, raw)
        c_status, c_out, c_err = native("execute-with-data", pte, ptd, raw)
    given = f"with its {TAG}.ptd" if control else f"without its {TAG}.ptd"
    if control:
        py, cpp = forward_values(py_out), forward_values(c_out)
        if py_status == 0 and c_status == 0 and len(py) == len(cpp) == 8 and all(
                abs(a - b) <= 1e-5 for a, b in zip(py, cpp)):
            return report(False, f"linear_relu_xnn.pte {given}: executes",
                          "the Python API and the C++ Module both executed forward, the same "
                          "outputs", py_out.strip().splitlines()[-1])
        print(f"could not tell: Python API {signal_name(py_status)}, C++ Module "
              f"{signal_name(c_status)}:\n{py_out}\n{py_err[-2000:]}\n{c_out}\n{c_err[-2000:]}")
        return 2
    if py_status == 3 and c_status == 2 and "execute(forward) failed with error" in c_out:
        return report(False, f"linear_relu_xnn.pte {given}: refused with an error",
                      "refused with an error", lines_with(py_out + c_out, "refused", "failed"))
    frames = crash_frames(c_err)
    in_xnnpack = bool(frames) and "libexecutorch_backend_xnnpack.so" in frames[0] and \
        FRAMES[0] in frames[0] and any(FRAMES[1] in f for f in frames[:6])
    python_crashed = (py_status == -11 and "program loaded" in py_out and
                      "method loaded" not in py_out)
    if python_crashed and c_status == -11 and in_xnnpack:
        return report(True, f"linear_relu_xnn.pte {given}: load_method refused with an error "
                      "(the program needs its external data)",
                      "SIGSEGV at load_method: in the Python API (Runtime.load_program, then "
                      "load_method) and in the C++ Module, inside the XNNPACK backend's "
                      "getConstantDataPtr under XNNCompiler::compileModel",
                      "\n".join(l for l in c_err.splitlines() if l.startswith("FATAL")) + "\n"
                      + "\n".join(frames[:6]))
    print(f"could not tell: Python API {signal_name(py_status)}, C++ Module "
          f"{signal_name(c_status)}:\n{py_out}\n{py_err[-2000:]}\n{c_out}\n{c_err[-3000:]}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
