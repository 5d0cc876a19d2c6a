"""One-method model: Linear(16, 8) + ReLU. The smallest program that makes a QNN context."""

NAME = "linear_relu"
BACKEND = "qnn"
PRECISIONS = ("fp16", "int8")
TOLERANCE = {"fp16": (0.02, 0.02), "int8": (0.1, 0.1)}  # (atol, rtol) against the CPU reference


def build():
    """Return {method: (module, example inputs)}; torch is imported here, not at load time."""
    import torch

    torch.manual_seed(0)

    class LinearRelu(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(16, 8)

        def forward(self, x):
            return torch.relu(self.linear(x))

    return {"forward": (LinearRelu().eval(), (torch.randn(1, 16),))}
