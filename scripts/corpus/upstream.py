"""Upstream's own QNN test models, as the executorch wheel ships them
(`executorch/backends/qualcomm/tests/models.py`), with the sample inputs their tests in
`test_qnn_delegate.py` lower them with: programs this project did not write.

Each entry is a program of the corpus: a name, the precision it is lowered in (fp16, or 8a8w
through upstream's QnnQuantizer with its default 8-bit activations and weights), and its
methods as {method: (module, sample inputs)}. The sample inputs only shape the lowering (and
calibrate the quantized builds); the suites feed the inputs the harness generates or a
program's `.inputs/` directory (GIVEN_INPUTS: the upstream sample inputs, for programs whose
inputs are token ids).
"""

from __future__ import annotations


def _models():
    from executorch.backends.qualcomm.tests import models as m

    return m


def catalogue() -> dict[str, tuple[str, str, dict]]:
    """{program name: (precision, what kind of program, {method: (module, inputs)})}.

    Left out because they do not lower here (QAIRT 2.51's x86_64 HTP prepare): upstream's
    MultiheadAttention in fp16 ("Failed to generate Qnn context binary") and
    ScaledDotProductAttention in 8a8w."""
    import torch

    m = _models()
    torch.manual_seed(0)
    mask = torch.tril(torch.randn(1, 1, 32, 32))
    mask[mask == 0] = float("-inf")
    one = lambda module, *inputs: {"forward": (module.eval(), tuple(inputs))}  # noqa: E731
    fp16 = {
        "conv2d": ("convolution", one(m.Conv2dSequential(), torch.randn(1, 1, 3, 3))),
        "conv2d_single": ("convolution", one(m.Conv2dSingle(), torch.randn(1, 1, 3, 3))),
        "conv1d": ("convolution", one(m.Conv1dSequential(), torch.randn(1, 1, 3))),
        "sdpa": ("attention", one(m.ScaledDotProductAttention(), torch.randn(1, 4, 32, 64),
                                  torch.randn(1, 4, 32, 64), torch.randn(1, 4, 32, 64), mask)),
        "layer_norm": ("norm", one(m.LayerNorm(), torch.randn(196, 768))),
        "rms_norm": ("norm", one(m.RmsNorm(), torch.randn(1, 1, 1, 4))),
        "batch_norm": ("norm", one(m.BatchNorm(32), torch.randn(4, 32, 16, 16))),
        "embedding_int32": ("embedding, int32 ids", one(
            m.Embedding(), torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]], dtype=torch.int32))),
        "embedding_int64": ("embedding, int64 ids", one(
            m.Embedding(), torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]], dtype=torch.int64))),
        "index_select": ("index_select, int64 index", one(
            m.IndexSelect(dim=1), torch.randn(2, 3, 4, 5), torch.tensor([0, 2]))),
        "gather": ("gather, int64 index", one(
            m.Gather(), torch.arange(128, dtype=torch.float32).view(64, 2),
            torch.ones(64, 2, dtype=torch.int64))),
        "add_broadcast": ("broadcasting", one(m.Add(), torch.randn(2, 5, 1, 3), torch.randn(4, 1))),
        "where": ("broadcasting, select", one(m.Where(), torch.randn(3, 2), torch.randn(3, 2),
                                              torch.randn(3, 2))),
        "argmax": ("int64 output", one(m.Argmax(dim=1, keepdim=False), torch.randn(8, 5))),
        "equal": ("bool output", one(m.Equal(), torch.randn(1, 2, 3, 4), torch.randn(2, 3, 4))),
        "chunk": ("several outputs", one(m.Chunk(), torch.randn(1, 1, 4, 3))),
        "topk_index": ("several ops, indexing", one(m.TopKandIndex(), torch.randn(3, 10))),
        "linear": ("linear", one(m.Linear(), torch.randn(3, 512))),
        "softmax": ("activation", one(m.Softmax(dim=-1), torch.randn(1, 4, 8, 8))),
        "mean": ("reduction", one(m.Mean(dim=(-1, -2), keepdim=True), torch.randn(2, 5, 1, 3))),
    }
    int8 = {
        "conv2d_8a8w": ("convolution", one(m.Conv2dSequential(), torch.randn(1, 1, 3, 3))),
        "linear_8a8w": ("linear", one(m.Linear(), torch.randn(3, 512))),
        "layer_norm_8a8w": ("norm", one(m.LayerNorm(), torch.randn(196, 768))),
        "add_broadcast_8a8w": ("broadcasting", one(m.Add(), torch.randn(2, 5, 1, 3),
                                                   torch.randn(4, 1))),
        "softmax_8a8w": ("activation", one(m.Softmax(dim=-1), torch.randn(1, 4, 8, 8))),
    }
    # Two graphs of one program, as upstream's test_qnn_backend_multi_graphs builds them: a
    # convolution sequence and its own second convolution (shared weights), one QNN context.
    seq = m.Conv2dSequential().eval()
    pairs = {
        "multi_graphs": ("two methods, shared weights", {
            "seq_conv": (seq, (torch.randn(1, 1, 3, 3),)),
            "single_conv": (seq.second, (torch.randn(1, 3, 3, 3),))}),
        "multi_graphs_linear": ("two methods", {
            "linear": (m.Linear().eval(), (torch.randn(3, 512),)),
            "layer_norm": (m.LayerNorm().eval(), (torch.randn(196, 768),))}),
    }
    out = {name: ("fp16", kind, methods) for name, (kind, methods) in fp16.items()}
    out.update({name: ("8a8w", kind, methods) for name, (kind, methods) in int8.items()})
    out.update({name: ("fp16", kind, methods) for name, (kind, methods) in pairs.items()})
    return out


# Programs whose `.inputs/` carry upstream's sample inputs: real token ids, as a user gives them.
GIVEN_INPUTS = ("embedding_int64",)


def lower(methods: dict, soc: str, precision: str) -> bytes:
    """Lower as upstream's tests do: to_edge_transform_and_lower_to_qnn with one compile spec
    per graph; 8a8w through QnnQuantizer (prepare, calibrate on the sample inputs, convert)."""
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        get_soc_to_chipset_map,
        to_edge_transform_and_lower_to_qnn,
    )

    from harness.programs.compile_worker import _quantize as quantize  # the built-in int8 builds' own

    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()[soc],
        backend_options=generate_htp_compiler_spec(use_fp16=precision == "fp16"))
    modules = {name: (quantize(mod, x) if precision == "8a8w" else mod)
               for name, (mod, x) in methods.items()}
    inputs = {name: x for name, (_, x) in methods.items()}
    if list(methods) == ["forward"]:
        edge = to_edge_transform_and_lower_to_qnn(modules["forward"], inputs["forward"], specs)
    else:
        edge = to_edge_transform_and_lower_to_qnn(modules, inputs,
                                                  {name: specs for name in methods})
    return edge.to_executorch().buffer
