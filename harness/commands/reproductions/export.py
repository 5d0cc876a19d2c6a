"""Regenerate this folder's programs (programs/*.pte) and their inputs (inputs/) from the model
sources in models/, with executorch's public lowering API only.

    python export.py            # every program of programs.json
    python export.py NAME ...   # only these (their file stems)

Each program is lowered for its SoC (programs.json: SM8650, fp16 HTP unless it says otherwise)
with `to_edge_transform_and_lower_to_qnn` (QNN) or `to_edge_transform_and_lower` with the
XNNPACK partitioner, and the buffers a method mutates get their initial values serialized
(`InitializedMutableBufferPass`), as eager PyTorch defines them. A program marked `damaged`
is the same lowering with 2 KiB of its QNN context binary flipped (behind the
QnnContextCustomProtocol magic 0x5678ABCD), so the QNN library refuses it at init; one marked
`spec_renamed` has its QNN delegates' compile spec key `qnn_compile_spec` renamed
`xnn_compile_spec` (same length: the program stays valid), so the backend finds no options.

The QNN lowering prepares the graph with the QNN libraries (`QNN_SDK_ROOT`, else the installed
onnxruntime-qnn wheel), which the dynamic loader must see when the process starts: the lowering
runs in a child process with them (common.qnn_environment).
"""

import copy
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import HERE, qnn_environment

CONTEXT_MAGIC = (0x5678ABCD).to_bytes(4, "little")


def model_module(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / "models" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mutated_buffers(module, inputs) -> list:
    import torch

    exported = torch.export.export(copy.deepcopy(module), inputs, strict=True)
    exported = exported.run_decompositions({})
    return sorted(set(exported.graph_signature.buffers_to_mutate.values()))


def backend_config(buffers: list):
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    return ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(buffers)]) if buffers \
        else None


def lower(entry: dict) -> bytes:
    import torch

    model = model_module(entry["model"])
    methods = model.build()
    module, inputs = methods["forward"]
    buffers = mutated_buffers(module, inputs)
    options = entry.get("options", {})
    if model.BACKEND == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        programs = {name: torch.export.export(m, x, strict=True)
                    for name, (m, x) in methods.items()}
        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
        return edge.to_executorch(backend_config(buffers)).buffer
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        get_soc_to_chipset_map,
        to_edge_transform_and_lower_to_qnn,
    )

    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()[entry["soc"]],
        backend_options=generate_htp_compiler_spec(use_fp16=entry["precision"] == "fp16"),
        debug=bool(options.get("debug_log")),  # QNN log level kLogLevelDebug
        shared_buffer=bool(options.get("shared_buffer")),  # I/O in QNN shared memory
    )
    # A model may keep its mutable buffers out of the QNN delegate: the runtime holds them and
    # the delegate computes (the lowering's skip_mutable_buffer=True).
    skip = bool(getattr(model, "QNN_RUNTIME_HELD_BUFFERS", False))
    edge = to_edge_transform_and_lower_to_qnn(module, inputs, specs, skip_mutable_buffer=skip)
    return edge.to_executorch(backend_config(buffers)).buffer


def damaged(pte: bytes) -> bytes:
    at = pte.find(CONTEXT_MAGIC)
    if at < 0:
        raise SystemExit("no QnnContextCustomProtocol magic: not a QNN program with a context")
    data = bytearray(pte)
    for offset in range(at + 64, min(at + 64 + 2048, len(data))):
        data[offset] ^= 0x5A
    return bytes(data)


def save_inputs(entry: dict) -> None:
    import numpy as np

    _, inputs = model_module(entry["model"]).build()["forward"]
    (HERE / "inputs").mkdir(exist_ok=True)
    for i, tensor in enumerate(inputs):
        data = tensor.detach().numpy()
        np.save(HERE / "inputs" / f"{entry['stem']}_{i}.npy", data)  # the Python scripts
        data.tofile(HERE / "inputs" / f"{entry['stem']}_{i}.bin")  # the C++ program


def run(names: list) -> int:
    entries = json.loads((HERE / "programs.json").read_text())
    chosen = [e for e in entries if not names or e["stem"] in names]
    (HERE / "programs").mkdir(exist_ok=True)
    for entry in chosen:
        pte = lower(entry)
        if entry.get("damaged"):
            pte = damaged(pte)
        if entry.get("spec_renamed"):  # the QNN delegates' compile spec key, same length
            pte = pte.replace(b"qnn_compile_spec", b"xnn_compile_spec")
        (HERE / "programs" / f"{entry['stem']}.pte").write_bytes(pte)
        save_inputs(entry)
        print(f"programs/{entry['stem']}.pte: {len(pte)} bytes ({entry['model']}, "
              f"{entry['soc']} {entry['precision']}{', damaged' if entry.get('damaged') else ''}"
              f"{', compile spec key renamed' if entry.get('spec_renamed') else ''})",
              flush=True)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        return run(sys.argv[2:])
    # The lowering writes scratch files into its working directory: not into this folder.
    with tempfile.TemporaryDirectory(prefix="export-") as scratch:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                               *sys.argv[1:]], env=qnn_environment(), cwd=scratch)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
