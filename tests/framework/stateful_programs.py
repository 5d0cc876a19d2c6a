"""Export stateful programs of each kind a user brings, for the tests of how their meaning is
judged (run as a script in a child process, which pays for the torch and executorch imports):

    python tests/framework/stateful_programs.py OUT_DIR [SOC]

Each is an accumulator (a 16-float buffer registered at ones, `acc.add_(x); return acc * 1.0`)
lowered for QNN fp16, with its ETRecord beside it (NAME.etrecord):
`acc_cpu_nopass` holds the buffer in the ExecuTorch runtime (skip_mutable_buffer=True) without
InitializedMutableBufferPass, so ExecuTorch leaves its start undefined; `acc_cpu_pass` the same
with the pass (its start is the ones); `acc_delegated` keeps it inside the QNN delegate
(skip_mutable_buffer=False). `mean_delegated` is a running mean of two buffers (`total`, `count`,
registered at ones) inside the delegate. `causal_mask` is upstream's CausalMask test model (a zero buffer
updated with masked_fill, inside the delegate), without an ETRecord.
"""

import sys
from pathlib import Path

import torch
from executorch.backends.qualcomm.utils.utils import (
    generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec, get_soc_to_chipset_map,
    to_edge_transform_and_lower_to_qnn)
from executorch.exir import ExecutorchBackendConfig
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass


class Accumulator(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.ones(16))

    def forward(self, x):
        self.acc.add_(x)
        return self.acc * 1.0


class RunningMean(torch.nn.Module):
    """Two mutable buffers: a running mean over the inputs, from a prior of one observation
    of ones. With both buffers started at zero its output is the input's mean so far, the
    same for every execute of a constant input: only changing inputs show its state."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.ones(16))
        self.register_buffer("count", torch.ones(16))

    def forward(self, x):
        self.total.add_(x)
        self.count.add_(1.0)
        return self.total / self.count


class CausalMask(torch.nn.Module):  # backends/qualcomm/tests/models.py of the wheel
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("causal_mask", torch.zeros((1, 1, 1, 128)))
        self.mask_length = 128

    def forward(self, padding_mask):
        self.causal_mask[:, :, :, : self.mask_length] = self.causal_mask[
            :, :, :, : self.mask_length].masked_fill(padding_mask, 1)
        return self.causal_mask + 1


def export(module, example, out: Path, soc: str, skip: bool, init: tuple[str, ...],
           record: bool) -> None:
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()[soc],
        backend_options=generate_htp_compiler_spec(use_fp16=True))
    edge = to_edge_transform_and_lower_to_qnn(module, example, specs, skip_mutable_buffer=skip,
                                              generate_etrecord=record)
    passes = [InitializedMutableBufferPass(list(init))] if init else []
    program = edge.to_executorch(ExecutorchBackendConfig(passes=passes))
    out.write_bytes(program.buffer)
    if record:
        program.get_etrecord().save(str(out.with_suffix(".etrecord")))
    print(f"wrote {out}", flush=True)


def main(out: Path, soc: str = "SM8650") -> None:
    out.mkdir(parents=True, exist_ok=True)
    x = (torch.full((16,), 0.5),)
    export(Accumulator(), x, out / "acc_cpu_nopass.pte", soc, True, (), True)
    export(Accumulator(), x, out / "acc_cpu_pass.pte", soc, True, ("acc",), True)
    export(Accumulator(), x, out / "acc_delegated.pte", soc, False, ("acc",), True)
    export(RunningMean(), x, out / "mean_delegated.pte", soc, False, ("total", "count"), True)
    torch.manual_seed(8)
    mask = (torch.rand((1, 1, 1, 128)) < 0.5,)
    export(CausalMask(), mask, out / "causal_mask.pte", soc, False, (), False)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
