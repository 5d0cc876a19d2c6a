"""Two-method model: `prefill` and `decode` share one set of weights, like an LLM's two graphs.

Lowered together, both graphs land in one QNN context, so the methods of one module share a
context handle (S2) and unloading one must not free the other's (S3).
"""

NAME = "prefill_decode"
BACKEND = "qnn"
PRECISIONS = ("fp16", "int8")
TOLERANCE = {"fp16": (0.02, 0.02), "int8": (0.15, 0.15)}
# A decode loop as an LLM runner drives one: prefill once, then decode steps, each taking the
# state the execute before it returned (input 1 <- output 0); tests/hil/test_decode_loop.py.
DECODE_LOOP = {"after": "prefill", "method": "decode", "feed": [[1, 0]], "steps": 4}


def build():
    import torch

    torch.manual_seed(0)
    shared = torch.nn.Linear(16, 16)

    class Prefill(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = shared

        def forward(self, tokens):  # [1, 4, 16] -> [1, 16]
            return torch.relu(self.proj(tokens)).sum(dim=1)

    class Decode(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = shared

        def forward(self, token, state):  # [1, 16], [1, 16] -> [1, 16]
            return torch.tanh(self.proj(token) + state)

    return {
        "prefill": (Prefill().eval(), (torch.randn(1, 4, 16),)),
        "decode": (Decode().eval(), (torch.randn(1, 16), torch.randn(1, 16))),
    }
