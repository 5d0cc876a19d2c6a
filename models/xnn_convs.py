"""XNNPACK convolutions beyond linear layers, one method each: a convolution without bias
(users reported a null-pointer crash in the packed-weight cache's look-up for it), one with
bias, and a depthwise convolution. Small, so orderings over them run fast."""

NAME = "xnn_convs"
BACKEND = "xnnpack"
PRECISIONS = ("fp32",)
TOLERANCE = {"fp32": (1e-4, 1e-4)}  # (atol, rtol) against the CPU reference


def build():
    """Return {method: (module, example inputs)}; torch is imported here, not at load time."""
    import torch

    def conv(**kwargs) -> torch.nn.Module:
        class Conv(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = torch.nn.Conv2d(**kwargs)

            def forward(self, x):
                return torch.relu(self.conv(x))

        return Conv().eval()

    torch.manual_seed(0)
    x = torch.randn(1, 16, 12, 12)
    return {
        "conv_nobias": (conv(in_channels=16, out_channels=32, kernel_size=3, bias=False), (x,)),
        "conv_bias": (conv(in_channels=16, out_channels=32, kernel_size=3, bias=True), (x,)),
        "depthwise": (conv(in_channels=16, out_channels=16, kernel_size=3, groups=16), (x,)),
    }
