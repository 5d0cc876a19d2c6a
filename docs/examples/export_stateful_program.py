"""Export a stateful program with its ETRecord, as a user would: an accumulator buffer that
starts at ones, lowered to QNN (the buffer inside the delegate, skip_mutable_buffer=False) or
to XNNPACK, its initial value serialized (InitializedMutableBufferPass), and the ETRecord saved
beside it as NAME.etrecord, where the suites find it and judge every execute against the
ETRecord's edge program run on CPU.

    python docs/examples/export_stateful_program.py OUT.pte [qnn|xnnpack] [SOC]
"""

import sys
from pathlib import Path

import torch
from executorch.exir import ExecutorchBackendConfig
from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass


class Accumulator(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("acc", torch.ones(16))

    def forward(self, x):
        self.acc.add_(x)
        return self.acc * 1.0


def lower(backend: str, soc: str):
    example = (torch.full((16,), 0.5),)
    if backend == "qnn":
        from executorch.backends.qualcomm.utils.utils import (
            generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec,
            get_soc_to_chipset_map, to_edge_transform_and_lower_to_qnn)

        specs = generate_qnn_executorch_compiler_spec(
            soc_model=get_soc_to_chipset_map()[soc],
            backend_options=generate_htp_compiler_spec(use_fp16=True))
        return to_edge_transform_and_lower_to_qnn(Accumulator(), example, specs,
                                                  skip_mutable_buffer=False,
                                                  generate_etrecord=True)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(Accumulator(), example)
    return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()],
                                       generate_etrecord=True)


def main(out: Path, backend: str = "qnn", soc: str = "SM8650") -> None:
    edge = lower(backend, soc)
    config = ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["acc"])])
    program = edge.to_executorch(config)
    out.write_bytes(program.buffer)
    program.get_etrecord().save(str(out.with_suffix(".etrecord")))
    print(f"wrote {out} and {out.with_suffix('.etrecord')}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:])
