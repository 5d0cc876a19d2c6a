"""Export small portable programs whose methods take and give the dtypes beyond float32 (run
as a script in a child process, which pays for the torch and executorch imports):

    python tests/framework/dtype_programs.py OUT_DIR

`dtypes.pte` has one method per dtype group, each on portable kernels that take that dtype in
executorch 1.5.1: `u16` (uint16 in, a uint16 slice out), `bf16` (bfloat16 arithmetic, a
bfloat16 and a float32 output), `f64_i16` (float64 and int16), `u32_u64` (uint32 and uint64
reshapes). `metadata.pte` adds an LLM export's kind of method: no inputs, an int output.
"""

import sys
from pathlib import Path

import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower


class U16(torch.nn.Module):
    def forward(self, x):  # uint16 [2, 3] -> uint16 [1, 3]: the second row
        return x.clone()[1:]


class BF16(torch.nn.Module):
    def forward(self, x):  # bfloat16 [2, 3] -> bfloat16, float32
        return x * 2 + 1, x.to(torch.float32)


class F64I16(torch.nn.Module):
    def forward(self, x, n):  # float64 [4], int16 [4] -> float64, int16
        return x * 0.5 - 1.0, n * 3


class U32(torch.nn.Module):
    def forward(self, a):  # uint32 [2, 2] -> uint32 [4]
        return a.reshape(4)


class Forward(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def export(methods: dict, path: Path, constant_methods: dict | None = None) -> None:
    programs = {name: torch.export.export(m, x) for name, (m, x) in methods.items()}
    edge = to_edge_transform_and_lower(programs, constant_methods=constant_methods,
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False))
    path.write_bytes(edge.to_executorch().buffer)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    u16 = torch.tensor([[0, 1, 2], [3, 4, 65534]], dtype=torch.uint16)
    export({
        "u16": (U16(), (u16,)),
        "bf16": (BF16(), (torch.zeros(2, 3, dtype=torch.bfloat16),)),
        "f64_i16": (F64I16(), (torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.int16))),
        "u32": (U32(), (torch.zeros(2, 2, dtype=torch.uint32),)),
    }, out / "dtypes.pte")
    # Metadata methods as upstream's LLM exports make them: constant methods, no inputs.
    export({"forward": (Forward(), (torch.zeros(2, 2),))}, out / "metadata.pte",
           constant_methods={"get_vocab_size": 32, "get_use_kv_cache": True})


if __name__ == "__main__":
    main(Path(sys.argv[1]))
