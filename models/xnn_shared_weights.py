"""XNNPACK program with two methods over the same weights (one Linear stack, called by
`prefill` on a batch of 8 rows and by `decode` on one row), as LLM exports share weights
between their methods. With a packed-weight cache, the second method's packs are the first's."""

NAME = "xnn_shared_weights"
BACKEND = "xnnpack"
PRECISIONS = ("fp32",)
TOLERANCE = {"fp32": (1e-4, 1e-4)}
WIDTH = 128


def build():
    import torch

    torch.manual_seed(0)

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    shared = Stack().eval()
    return {"prefill": (shared, (torch.randn(8, WIDTH),)),
            "decode": (shared, (torch.randn(1, WIDTH),))}
