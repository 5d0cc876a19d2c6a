"""A KV-cache update as LLM exports write it: `index_copy_` of the new key row into a cache
buffer at an input position, the cache (8 x 4 floats, 128 bytes, non-zero initial values) a
mutable buffer inside the QNN delegate. The output is the whole cache, so every slot the
execute did not write must still hold the program's initial value."""

NAME = "kv_cache"
BACKEND = "qnn"
PRECISIONS = ("fp16",)
TOLERANCE = {"fp16": (0.02, 0.02)}  # (atol, rtol) against the CPU reference


def build():
    """Return {method: (module, example inputs)}; torch is imported here, not at load time."""
    import torch

    class KvCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("k_cache", torch.arange(32, dtype=torch.float32).reshape(1, 8, 4) / 8 + 1)

        def forward(self, input_pos, k_val):
            self.k_cache.index_copy_(1, input_pos, k_val)
            return self.k_cache + 0

    pos = torch.tensor([5], dtype=torch.int64)
    return {"forward": (KvCache().eval(), (pos, torch.full((1, 1, 4), -0.75)))}
