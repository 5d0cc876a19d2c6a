"""The accumulator of stateful_accumulator.py lowered with its mutable buffer held by the runtime
(`skip_mutable_buffer=True`: the QNN delegate computes, ExecuTorch keeps and updates the
buffer, whose initial value the program carries through InitializedMutableBufferPass). Correct
on executorch 1.5.1, so it is the stateful program of the fault sweep: an injected QNN failure
must not leave a Module with a state other than its own."""

NAME = "stateful_accumulator_rt"
BACKEND = "qnn"
PRECISIONS = ("fp16",)
TOLERANCE = {"fp16": (0.02, 0.02)}  # (atol, rtol) against the CPU reference
QNN_RUNTIME_HELD_BUFFERS = True  # harness/programs/compile_worker.py: skip_mutable_buffer=True


def build():
    """Return {method: (module, example inputs)}; torch is imported here, not at load time."""
    import torch

    class Accumulator(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("acc", torch.linspace(1.0, 2.5, 16))

        def forward(self, x):
            self.acc.add_(x)
            return self.acc * 1.0

    return {"forward": (Accumulator().eval(), (torch.full((16,), 0.5),))}
