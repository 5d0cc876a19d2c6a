"""XNNPACK model with tens of MiB of fp32 weights, for the packed-weight cache scenarios (X1).

`forward` is 8 x Linear(1024, 1024) (32 MiB of weights, one XNNPACK fully-connected pack per
layer); `other` is 2 x Linear(1024, 1024) with different weights. The runtime keys packed weights
by the sha256 of their data, so a cache file written while loading `other` holds nothing that
`forward` can use: to `forward` it is a cache file of another model, produced from the same
compiled program so no second 30 MiB model has to be built.
"""

NAME = "xnn_linear_stack"
BACKEND = "xnnpack"
PRECISIONS = ("fp32",)
TOLERANCE = {"fp32": (1e-3, 1e-3)}  # (atol, rtol) against the CPU reference
WIDTH = 1024
LAYERS = {"forward": 8, "other": 2}
# Unpacked fp32 weight + bias bytes each method's delegate packs at load time.
WEIGHT_BYTES = {"forward": 8 * (1024 * 1024 + 1024) * 4, "other": 2 * (1024 * 1024 + 1024) * 4}


def build():
    """Return {method: (module, example inputs)}; torch is imported here, not at load time."""
    import torch

    class LinearStack(torch.nn.Module):
        def __init__(self, layers: int) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers))
            with torch.no_grad():  # keep activations O(1) through the stack (He init)
                for layer in self.layers:
                    layer.weight.normal_(0.0, (2.0 / WIDTH) ** 0.5)

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i + 1 < len(self.layers):
                    x = torch.relu(x)
            return x

    methods = {}
    for seed, (name, layers) in enumerate(LAYERS.items()):
        torch.manual_seed(seed)
        module = LinearStack(layers).eval()
        methods[name] = (module, (torch.randn(1, WIDTH),))
    return methods
