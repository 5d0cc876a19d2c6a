"""One-method model with other weights and shapes than linear_relu but the same method name.

Two different programs that both call their method `forward` must never share a QNN context:
a cache keyed too loosely (by method name alone) would hand one program the other's graph.
"""

NAME = "mlp_tanh"
BACKEND = "qnn"
PRECISIONS = ("fp16", "int8")
TOLERANCE = {"fp16": (0.02, 0.02), "int8": (0.1, 0.1)}


def build():
    import torch

    torch.manual_seed(1)

    class MlpTanh(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(32, 8)

        def forward(self, x):
            return torch.tanh(self.down(torch.relu(self.up(x))))

    return {"forward": (MlpTanh().eval(), (torch.randn(1, 16),))}
