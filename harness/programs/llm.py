"""The layout of an LLM export as upstream's Qualcomm llama flow writes one, read from the
program: what a decode loop must know to drive it as upstream's QNN llama runner does
(examples/qualcomm/oss_scripts/llama/runner/: its KV manager keeps the caches, the attention
mask and the positions, and feeds each step's argmax token back).

The metadata methods say the context length, the vocabulary, the layers and heads and whether
the graphs take KV caches (`get_max_context_len`, `get_vocab_size`, `get_n_layers`,
`get_n_kv_heads`, `get_head_dim`, `get_use_kv_cache`); the methods' signatures say the rest:
`kv_forward` (decode) and `prefill_forward` (hybrid mode) take tokens [1, ar], an attention
mask [1, 1, ar, ctx], positions [1, ar], then each layer's key cache [1, heads, head_dim,
ctx - ar] and each layer's value cache [1, heads, ctx - ar, head_dim]; they return logits
[1, ar, vocab] and the new entries only ([1, heads, head_dim, ar] and [1, heads, ar, head_dim])
in the same order. `llm_layout` gives them by index, or one ModelError saying what is missing.
"""

from __future__ import annotations

import dataclasses

from harness.errors import ModelError
from harness.programs.pte import ProgramInfo, TensorSpec

DECODE_METHOD = "kv_forward"
PREFILL_METHOD = "prefill_forward"
NEEDED_METADATA = ("get_max_context_len", "get_vocab_size", "get_n_layers", "get_n_kv_heads",
                   "get_head_dim", "get_use_kv_cache")
"""The metadata methods (upstream's `LlamaModel.get_metadata`) a decode loop reads."""


@dataclasses.dataclass(frozen=True)
class CacheIO:
    """One layer's key or value cache of a method: the input it is fed as and the output that
    returns its new entries."""

    kind: str  # "k" ([1, heads, head_dim, len]) or "v" ([1, heads, len, head_dim])
    layer: int
    input: int
    output: int


@dataclasses.dataclass(frozen=True)
class MethodLayout:
    method: str
    ar_len: int  # tokens per execute
    cache_len: int  # cache entries the method takes: context - ar_len
    tokens: int  # input indices
    mask: int
    positions: int
    logits: int  # output index
    caches: tuple[CacheIO, ...]

    def describe(self) -> str:
        return (f"{self.method}: ar_len {self.ar_len}, caches of {self.cache_len} entries "
                f"({len(self.caches)} in and out)")


@dataclasses.dataclass(frozen=True)
class LlmLayout:
    context: int
    vocab: int
    layers: int
    heads: int
    head_dim: int
    decode: MethodLayout
    prefill: MethodLayout | None  # hybrid mode only

    def describe(self) -> str:
        parts = [self.decode.describe()] + ([self.prefill.describe()] if self.prefill else [])
        return (f"LLM export: context {self.context}, vocab {self.vocab}, {self.layers} layers "
                f"x {self.heads} KV heads x head_dim {self.head_dim}; " + "; ".join(parts))


def is_llm_export(info: ProgramInfo) -> bool:
    """Whether the program names the flow's decode method (so a layout is expected of it)."""
    return DECODE_METHOD in info.methods


def llm_layout(info: ProgramInfo) -> LlmLayout:
    """The program's decode-loop layout; a ModelError naming every metadata method that is
    missing, or the first input or output that is not where the flow puts it."""
    if not is_llm_export(info):
        raise ModelError(f"{info.path}: a decode loop needs the flow's decode method "
                         f"{DECODE_METHOD!r} (the program has {', '.join(info.methods)})")
    meta = info.metadata
    missing = [m for m in NEEDED_METADATA if m not in meta]
    if missing:
        raise ModelError(f"{info.path}: a decode loop reads its layout from the metadata "
                         f"methods {', '.join(NEEDED_METADATA)}; the program has no "
                         f"{', '.join(missing)} (export them with constant_methods=, as "
                         "upstream's llama flow does)")
    if meta["get_use_kv_cache"] is not True:
        raise ModelError(f"{info.path}: get_use_kv_cache is {meta['get_use_kv_cache']!r}: a "
                         "graph without KV-cache I/O has no decode loop to drive")
    ints: dict[str, int] = {}
    bad = []
    for m in NEEDED_METADATA[:-1]:
        v = meta[m]
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            ints[m] = v
        else:
            bad.append(f"{m} {v!r}")
    if bad:
        raise ModelError(f"{info.path}: the metadata must be positive integers: {', '.join(bad)}")
    layout = LlmLayout(ints["get_max_context_len"], ints["get_vocab_size"], ints["get_n_layers"],
                       ints["get_n_kv_heads"], ints["get_head_dim"],
                       _method(info, DECODE_METHOD, ints), None)
    if PREFILL_METHOD in info.methods:
        layout = dataclasses.replace(layout, prefill=_method(info, PREFILL_METHOD, ints))
    return layout


def _method(info: ProgramInfo, name: str, meta: dict[str, int]) -> MethodLayout:
    method = info.methods[name]
    ctx, vocab, layers = meta["get_max_context_len"], meta["get_vocab_size"], meta["get_n_layers"]
    heads, dim = meta["get_n_kv_heads"], meta["get_head_dim"]

    def fail(what: str, got: str) -> ModelError:
        return ModelError(f"{info.path}: method {name!r} {what} (context {ctx}, vocab {vocab}, "
                          f"{layers} layers x {heads} heads x {dim}, from its metadata), but it "
                          f"is {got}: not the layout upstream's llama flow exports")

    inputs, outputs = method.inputs, method.outputs
    want = 3 + 2 * layers
    if len(inputs) != want or len(outputs) != 1 + 2 * layers:
        raise fail(f"takes {want} inputs and returns {1 + 2 * layers} outputs (tokens, mask, "
                   "positions and a key and a value cache per layer)",
                   f"{len(inputs)} inputs and {len(outputs)} outputs")
    tokens = inputs[0]
    if len(tokens.shape) != 2 or tokens.dtype not in ("int32", "int64") or tokens.shape[0] != 1:
        raise fail("input 0 is the tokens, int32 or int64 [1, ar]", str(tokens))
    ar = tokens.shape[1]
    if not 0 < ar < ctx:
        raise fail(f"input 0 has 1 to {ctx - 1} tokens", str(tokens))
    length = ctx - ar

    def check(spec: TensorSpec, shape: tuple[int, ...], what: str) -> None:
        if tuple(spec.shape) != shape:
            raise fail(f"{what} is {list(shape)}", str(spec))

    check(inputs[1], (1, 1, ar, ctx), "input 1 (the attention mask)")
    check(inputs[2], (1, ar), "input 2 (the positions)")
    check(outputs[0], (1, ar, vocab), "output 0 (the logits)")
    caches = []
    for layer in range(layers):
        k_in, v_in = 3 + layer, 3 + layers + layer
        k_out, v_out = 1 + layer, 1 + layers + layer
        check(inputs[k_in], (1, heads, dim, length), f"input {k_in} (layer {layer}'s key cache)")
        check(inputs[v_in], (1, heads, length, dim), f"input {v_in} (layer {layer}'s value cache)")
        check(outputs[k_out], (1, heads, dim, ar), f"output {k_out} (layer {layer}'s new keys)")
        check(outputs[v_out], (1, heads, ar, dim), f"output {v_out} (layer {layer}'s new values)")
        caches += [CacheIO("k", layer, k_in, k_out), CacheIO("v", layer, v_in, v_out)]
    return MethodLayout(name, ar, length, 0, 1, 2, 0, tuple(caches))
