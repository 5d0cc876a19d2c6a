"""Two-method model whose prefill activations exceed the HTP's VTCM, so its QNN context needs
a spill-fill buffer (about 33 MB for SM8650 fp16); decode shares the weights and needs none.

Used by S7: with spill-fill set up at compile time, every delegate of the program must carry
the program-wide buffer size, because whichever method loads first sizes the shared buffer.
"""

NAME = "prefill_decode_spill"
BACKEND = "qnn"
PRECISIONS = ("fp16", "int8")
TOLERANCE = {"fp16": (0.05, 0.05), "int8": (0.3, 0.3)}


def build():
    import torch

    torch.manual_seed(0)
    up = torch.nn.Linear(256, 2048)
    gate = torch.nn.Linear(256, 2048)
    down = torch.nn.Linear(2048, 256)

    class Prefill(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.gate, self.down = up, gate, down

        def forward(self, tokens):  # [1, 4096, 256] -> [1, 4096, 256]
            return self.down(torch.relu(self.up(tokens)) * self.gate(tokens))

    class Decode(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.down = up, down

        def forward(self, token):  # [1, 1, 256] -> [1, 1, 256]
            return torch.tanh(self.down(self.up(token)))

    return {"prefill": (Prefill().eval(), (torch.randn(1, 4096, 256),)),
            "decode": (Decode().eval(), (torch.randn(1, 1, 256),))}
