"""The control of `stateful_accumulator`: the same module lowered to XNNPACK, where the buffer is
not delegated (the ExecuTorch runtime holds it in the method's planned memory and copies the
update back), so a QNN delegate's mutable-buffer handling cannot apply. The n-th execute of a
Module must give `initial + n * x`."""

NAME = "stateful_accumulator_xnn"
BACKEND = "xnnpack"
PRECISIONS = ("fp32",)
TOLERANCE = {"fp32": (1e-4, 1e-4)}


def build():
    """Return {method: (module, example inputs)}; torch is imported here, not at load time."""
    import torch

    class Accumulator(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Non-zero and small: fresh zeroed pages cannot hide a missing initial value.
            self.register_buffer("acc", torch.linspace(1.0, 2.5, 16))

        def forward(self, x):
            self.acc.add_(x)
            return self.acc * 1.0

    return {"forward": (Accumulator().eval(), (torch.full((16,), 0.5),))}
