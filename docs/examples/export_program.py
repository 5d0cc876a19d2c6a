"""Export a small model of your own to an ExecuTorch program with a QNN delegate: the kind of
`.pte` the HIL suites take with `--pte`. Needs the QNN libraries the lowering uses (a QAIRT SDK,
or `python -m harness env` for the ones the harness found).

    python export_program.py gated_mlp.pte            # SM8650, fp16
    python export_program.py gated_mlp.pte SM8750     # another SoC
"""

import sys

import torch
from executorch.backends.qualcomm.utils.utils import (
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
    get_soc_to_chipset_map,
    to_edge_transform_and_lower_to_qnn,
)


class GatedMlp(torch.nn.Module):
    """Not one of the harness's built-in models: a sigmoid-gated two-layer MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(24, 32)
        self.gate = torch.nn.Linear(24, 32)
        self.down = torch.nn.Linear(32, 12)

    def forward(self, x):
        return self.down(self.up(x) * torch.sigmoid(self.gate(x)))


def main(out: str, soc: str = "SM8650") -> None:
    torch.manual_seed(0)
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()[soc],
        backend_options=generate_htp_compiler_spec(use_fp16=True))
    example = (torch.randn(2, 24),)
    edge = to_edge_transform_and_lower_to_qnn(GatedMlp().eval(), example, specs)
    with open(out, "wb") as f:
        f.write(edge.to_executorch().buffer)
    print(f"wrote {out} for {soc}")


if __name__ == "__main__":
    main(*sys.argv[1:])
