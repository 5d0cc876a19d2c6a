"""The control of `kv_cache`: the same `index_copy_` KV-cache update lowered to XNNPACK, where
the cache is not delegated (the ExecuTorch runtime holds it and runs the copy), so a QNN
delegate's mutable-buffer handling cannot apply."""

NAME = "kv_cache_xnn"
BACKEND = "xnnpack"
PRECISIONS = ("fp32",)
TOLERANCE = {"fp32": (1e-4, 1e-4)}


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
