"""An LLM-shaped program, exported the way ExecuTorch's Qualcomm llama flow exports one in
"hybrid" mode, from the llama model definitions the wheel ships (random weights).

The flow's own script (`examples/qualcomm/oss_scripts/llama/llama.py`) and its static model do
not import offline (its package imports safetensors and transformers), so the decoder is put
together here from `executorch.examples.models.llama` (FeedForward, precompute_freqs_cis) and
torch's RMSNorm (the flow's static model uses it too) with the flow's static-cache layout, I/O
and export steps:

- two methods, `prefill_forward` (ar_len 8) and `kv_forward` (ar_len 1), lowered together with
  `to_edge_transform_and_lower_to_qnn` (one QNN delegate each, one shared context);
- inputs: int32 tokens [1, ar] and positions [1, ar], a uint16 attention mask [1, 1, ar, ctx]
  (65535 attend, 0 masked), ten uint8 KV-cache tensors (five layers: keys
  [1, heads, head_dim, ctx - ar], values [1, heads, ctx - ar, head_dim]);
- outputs: uint16 logits [1, ar, vocab] and the ten uint8 cache updates (the new entries only);
- quantization as the flow's recipe does it: 16a8w by default, the KV path 8-bit through
  upstream's `annotate_kv_8bit`, quantized I/O through `TagQuantIO` and `BuildQuantIo`;
- the `get_*` metadata as constant methods (no delegate, no inputs), as the flow writes them:
  ints, the bool `get_use_kv_cache`, the double `get_logits_scale`, and ten
  `get_kv_output_N_quant_attr` returning (double, int, int, int, string);
- `llm_hybrid_unplanned`: the same program with inputs and outputs not memory-planned, as the
  flow lowers for its runner (the app owns the KV caches and logits). It is the same model,
  quantized and lowered once (`_lowered`): the two programs differ in memory planning only,
  which runs after lowering, so the second costs seconds instead of another minute.
"""

from __future__ import annotations

import copy
import math

AR_PREFILL = 8
CONTEXT = 32
LAYERS = 5
HEADS = 2
HEAD_DIM = 16
DIM = HEADS * HEAD_DIM
VOCAB = 64
MASKED = -255.0  # the mask's float value where a position may not be attended (uint16 0)


def _decoder(ar_len: int):
    import torch
    from torch import nn

    from executorch.examples.models.llama.feed_forward import FeedForward
    from executorch.examples.models.llama.rope import precompute_freqs_cis
    from torch.nn import RMSNorm

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention_norm = RMSNorm(DIM)
            self.wq = nn.Linear(DIM, DIM, bias=False)
            self.wk = nn.Linear(DIM, DIM, bias=False)
            # V as a 1x1 convolution, as the flow's model has it: annotate_kv_8bit tags the V
            # path 8-bit back to it, so the 16- to 8-bit step lands on the permute after it (a
            # Transpose, which converts; the HTP's Reshape after a linear does not).
            self.wv_conv = nn.Conv2d(DIM, DIM, 1, bias=False)
            self.wo = nn.Linear(DIM, DIM, bias=False)
            self.ffn_norm = RMSNorm(DIM)
            self.feed_forward = FeedForward(DIM, 2 * DIM)

        @staticmethod
        def rope(x, cos, sin):
            x1, x2 = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

        def forward(self, h, cos, sin, mask, k_cache, v_cache):
            x = self.attention_norm(h)
            q = self.wq(x).view(1, ar_len, HEADS, HEAD_DIM).transpose(1, 2)
            k = self.wk(x).view(1, ar_len, HEADS, HEAD_DIM).transpose(1, 2)
            v = self.wv_conv(x.reshape(1, ar_len, 1, DIM).transpose(1, 3))  # [1, dim, 1, ar]
            v = v.permute(0, 3, 1, 2).squeeze(-1)  # [1, ar, dim]
            v = v.view(1, ar_len, HEADS, HEAD_DIM).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            new_k = k.transpose(2, 3)  # [1, heads, head_dim, ar]
            keys = torch.cat([k_cache, new_k], dim=-1)  # [1, heads, head_dim, ctx]
            values = torch.cat([v_cache, v], dim=2)  # [1, heads, ctx, head_dim]
            scores = torch.matmul(q, keys) / math.sqrt(HEAD_DIM) + mask
            out = torch.matmul(torch.softmax(scores, dim=-1), values)
            h = h + self.wo(out.transpose(1, 2).reshape(1, ar_len, DIM))
            h = h + self.feed_forward(self.ffn_norm(h))
            return h, new_k, v

    class HybridDecoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(VOCAB, DIM)
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
            self.norm = RMSNorm(DIM)
            self.output = nn.Linear(DIM, VOCAB, bias=False)
            cos, sin = precompute_freqs_cis(HEAD_DIM, CONTEXT)
            self.register_buffer("freqs_cos", cos, persistent=False)
            self.register_buffer("freqs_sin", sin, persistent=False)

        def forward(self, tokens, atten_mask, input_pos, k_caches: list, v_caches: list):
            h = self.tok_embeddings(tokens)
            cos, sin = self.freqs_cos[input_pos[0]], self.freqs_sin[input_pos[0]]
            new_ks, new_vs = [], []
            for layer, k_cache, v_cache in zip(self.layers, k_caches, v_caches):
                h, new_k, new_v = layer(h, cos, sin, atten_mask, k_cache, v_cache)
                new_ks.append(new_k)
                new_vs.append(new_v)
            return (self.output(self.norm(h)), *new_ks, *new_vs)

    return HybridDecoder().eval()


def _example_inputs(ar_len: int, seed: int = 0):
    """Calibration inputs as a decode step sees them: a causal mask over the valid cache."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    past = CONTEXT - ar_len
    tokens = torch.randint(0, VOCAB, (1, ar_len), generator=gen, dtype=torch.int32)
    pos = torch.arange(ar_len, dtype=torch.int32).view(1, ar_len)
    mask = torch.full((1, 1, ar_len, CONTEXT), MASKED)
    for i in range(ar_len):
        mask[..., i, past:past + i + 1] = 0.0
    ks = [torch.randn(1, HEADS, HEAD_DIM, past, generator=gen) for _ in range(LAYERS)]
    vs = [torch.randn(1, HEADS, past, HEAD_DIM, generator=gen) for _ in range(LAYERS)]
    return tokens, mask, pos, ks, vs


def metadata(ar_len: int, decode=None) -> dict:
    """The flow's `get_*` constant methods as upstream writes them (executorch's
    examples/qualcomm/oss_scripts/llama in the wheel): `LlamaModel.get_metadata`
    (model/static_llama.py: ints and the bool `get_use_kv_cache`), and from the quantized decode
    graph `decode` (wrappers/llm_wrappers.py) the logits' `get_logits_scale` (a double) and
    `get_logits_zero_point`, and per KV-cache output `get_kv_output_N_quant_attr`:
    (scale, zero point, quant min, quant max, str(dtype)) = (double, int, int, int, string)."""
    meta = {
        "get_ar_len": ar_len, "get_bos_id": 1, "get_eos_id": 2, "get_dim": DIM,
        "get_head_dim": HEAD_DIM, "get_max_batch_size": 1, "get_max_seq_len": CONTEXT,
        "get_max_context_len": CONTEXT, "get_n_bos": 1, "get_n_eos": 1,
        "get_n_kv_heads": HEADS, "get_n_layers": LAYERS, "get_vocab_size": VOCAB,
        "get_use_kv_cache": True, "get_kv_io_bit_width": 8,
    }
    if decode is not None:
        meta.update(quant_attrs(decode, ar_len))
    return meta


def quant_attrs(decode, ar_len: int) -> dict:
    """What upstream's `_save_logits_quant_attrs` and `_save_output_kv_cache_quant_attrs` read
    from the quantized decode graph, in its node order: the dequantize that ends the logits
    ([1, ar, vocab]) and each one that ends a KV-cache output (last two dims a cache's)."""
    import torch
    from executorch.backends.qualcomm.builders.utils import is_graph_output

    dequantize = torch.ops.quantized_decomposed.dequantize_per_tensor.default
    meta: dict = {}
    for node in decode.graph.nodes:
        if node.op != "output":
            continue
        for out in node.args[0]:
            if (out.target == dequantize
                    and tuple(out.args[0].args[0].meta["val"].size()) == (1, ar_len, VOCAB)):
                meta["get_logits_scale"] = out.args[1]
                meta["get_logits_zero_point"] = out.args[2]
                break
    cache_shapes = {(HEAD_DIM, CONTEXT), (CONTEXT, HEAD_DIM), (HEAD_DIM, ar_len),
                    (ar_len, HEAD_DIM)}
    kv_idx = 0
    for node in decode.graph.nodes:
        if not is_graph_output(node):
            continue
        source = node.args[0].args[0]
        if tuple(source.meta["val"].size()[-2:]) in cache_shapes:
            meta[f"get_kv_output_{kv_idx}_quant_attr"] = [
                node.args[1], node.args[2], node.args[3], node.args[4], str(node.args[5])]
            kv_idx += 1
    return meta


# Programs lowered as upstream's flow lowers for its runner: inputs and outputs left out of
# memory planning (MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)), so
# the app owns the KV caches and logits and binds them (set_input / set_output_data_ptr).
UNPLANNED_IO = {"llm_hybrid_unplanned"}


def _methods() -> dict:
    methods = {"kv_forward": (_decoder(1), _example_inputs(1)),
               "prefill_forward": (_decoder(AR_PREFILL), _example_inputs(AR_PREFILL))}
    # One set of weights for both graphs, as the flow loads one checkpoint into both.
    methods["prefill_forward"][0].load_state_dict(methods["kv_forward"][0].state_dict())
    return methods


def catalogue() -> dict[str, tuple[str, str, dict]]:
    """{name: (precision, kind, {method: (module, inputs)})} like upstream.catalogue()."""
    methods = _methods()  # one model: the programs differ in memory planning only
    return {
        "llm_hybrid": ("16a8w", "LLM hybrid: prefill + decode, KV-cache I/O, metadata",
                       methods),
        "llm_hybrid_unplanned": ("16a8w", "LLM hybrid, I/O not memory-planned (app-owned)",
                                 methods),
    }


def lowering(name: str):
    """The lowering of catalogue program `name`: `lower`, with unplanned I/O where the flow
    lowers so."""
    import functools

    return functools.partial(lower, unplanned_io=name in UNPLANNED_IO)


def _quantize(module, inputs):
    import torch
    from executorch.backends.qualcomm.quantizer.custom_annotation import annotate_kv_8bit
    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer, QuantDtype
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_16a8w)
    quantizer.add_custom_quant_annotations((annotate_kv_8bit,))
    graph = torch.export.export(module, inputs, strict=True).module()
    prepared = prepare_pt2e(graph, quantizer)
    for seed in range(4):
        prepared(*_example_inputs(inputs[0].shape[1], seed))
    return convert_pt2e(prepared)


def _quant_io_dtype(node):
    """TagQuantIO's question, answered as the flow's _tag_ios does: KV caches in and out uint8,
    the mask and the logits uint16, tokens and positions stay int32."""
    import torch
    from executorch.backends.qualcomm.builders.utils import is_graph_output

    shape = tuple(node.meta["val"].shape) if hasattr(node.meta.get("val"), "shape") else ()
    if node.op == "placeholder":
        if "caches" in node.name:
            return torch.uint8
        if len(shape) == 4 and shape[-1] == CONTEXT and shape[1] == 1:
            return torch.uint16  # the attention mask
        return None
    if is_graph_output(node):
        return torch.uint16 if shape and shape[-1] == VOCAB and len(shape) == 3 else torch.uint8
    return None


# (id of a catalogue's methods, soc, precision) -> (those methods, their lowered program): the
# methods are held so that their id is not reused while the entry lives.
_LOWERED: dict[tuple, tuple] = {}


def lower(methods: dict, soc: str, precision: str, unplanned_io: bool = False) -> bytes:
    from executorch.backends.qualcomm._passes.build_quant_io import BuildQuantIo
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    planning = (MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)
                if unplanned_io else MemoryPlanningPass())
    # A copy: to_executorch runs its passes on the edge program in place.
    edge = copy.deepcopy(_lowered(methods, soc, precision))
    return edge.to_executorch(ExecutorchBackendConfig(
        passes=[BuildQuantIo()], memory_planning_pass=planning)).buffer


def _lowered(methods: dict, soc: str, precision: str):
    """The methods quantized and lowered to QNN (the edge program), once per model."""
    key = (id(methods), soc, precision)
    if key not in _LOWERED:
        _LOWERED[key] = (methods, _lower_to_edge(methods, soc, precision))
    return _LOWERED[key][1]


def _lower_to_edge(methods: dict, soc: str, precision: str):
    from executorch.backends.qualcomm._passes import TagQuantIO
    from executorch.backends.qualcomm._passes.qnn_pass_manager import QnnPassManager
    from executorch.backends.qualcomm.utils.constants import (
        QCOM_PASS_ACTIVATE_KEY,
        QCOM_PASS_ARGS_KWARGS_DEFAULTS_KEY,
    )
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        get_soc_to_chipset_map,
        to_edge_transform_and_lower_to_qnn,
    )
    assert precision == "16a8w", precision
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()[soc],
        backend_options=generate_htp_compiler_spec(use_fp16=False))
    passes, deps = {}, {}
    for name in methods:
        job = QnnPassManager.get_capture_program_passes()
        job[TagQuantIO][QCOM_PASS_ACTIVATE_KEY] = True
        job[TagQuantIO][QCOM_PASS_ARGS_KWARGS_DEFAULTS_KEY]["get_quant_io_dtype_fn"] = \
            _quant_io_dtype
        passes[name] = job
        deps[name] = QnnPassManager.get_passes_dependency_for_capture_program()
    modules = {name: _quantize(m, x) for name, (m, x) in methods.items()}
    return to_edge_transform_and_lower_to_qnn(
        modules, {name: x for name, (_, x) in methods.items()},
        {name: specs for name in methods},
        constant_methods=metadata(1, modules["kv_forward"]),
        dep_table=deps, passes_job=passes)
