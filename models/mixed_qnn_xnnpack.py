"""One program, two backends: the linear layers go to XNNPACK (the QNN partitioner is told to
skip them), the activation in between to QNN, so one method runs XNNPACK -> QNN -> XNNPACK
delegates in a row. Module lifetime bugs of either backend's caches show here together."""

NAME = "mixed_qnn_xnnpack"
BACKEND = "qnn+xnnpack"
PRECISIONS = ("fp16",)
TOLERANCE = {"fp16": (0.02, 0.02)}
QNN_SKIP_OPS = ("aten.linear.default",)  # left to XNNPACK


def build():
    import torch

    torch.manual_seed(0)

    class Mixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(16, 32)
            self.down = torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.down(torch.tanh(self.up(x)))

    return {"forward": (Mixed().eval(), (torch.randn(1, 16),))}
