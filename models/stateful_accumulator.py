"""A stateful program: a 16-float accumulator buffer (64 bytes) that starts at non-zero values and
lives inside the QNN delegate (a delegated mutable buffer, `skip_mutable_buffer=False`, the
lowering's default). Each execute adds the input to the buffer and returns it, so the n-th
execute of a Module must give `initial + n * x`: the reference carries the state."""

NAME = "stateful_accumulator"
BACKEND = "qnn"
PRECISIONS = ("fp16",)
TOLERANCE = {"fp16": (0.02, 0.02)}  # (atol, rtol) against the CPU reference


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
