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
from pathlib import Path
from typing import Any

from harness.errors import ModelError
from harness.programs.pte import ProgramInfo, TensorSpec
from harness.protocol.scenario_file import DecodeSpec
from harness.protocol.tensors import TensorFile, numpy_dtype, write_array

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


PROMPT_LEN = 4
"""Tokens of the loop's fixed prompt (fewer when the prompt's method takes fewer per execute)."""
DEFAULT_DECODE_STEPS = 8
"""Decode steps after the prompt (fewer when the context holds fewer)."""
MASK_VALUES: dict[str, tuple[float, float]] = {"uint16": (65535, 0), "uint8": (255, 0),
                                               "float32": (0.0, -65535.0)}
"""The attention mask's (attended, masked) values per dtype, as upstream's KV manager writes
them (a quantized mask's maximum and 0; a float mask's additive 0 and -65535)."""


@dataclasses.dataclass(frozen=True)
class LoopStep:
    """One execute of the loop: its method, its inputs as files, and (a decode step) how the
    runner builds its token and caches from the execute before it (the protocol's `decode`)."""

    method: str
    inputs: tuple[TensorFile, ...]
    decode: DecodeSpec | None = None


@dataclasses.dataclass(frozen=True)
class DecodeLoop:
    """A decode loop as upstream's QNN llama runner drives the layout: the prompt `prompt`
    through the prefill method (or, decode-only, its first token through the decode method),
    then one token per step through the decode method, each the argmax of the execute before,
    with the new KV entries written after the cached ones (its SMART_MASK mode: the caches
    keep their place, the mask says which entries count) and the mask and position moved on."""

    prompt: tuple[int, ...]
    steps: tuple[LoopStep, ...]  # the prompt's execute first

    def describe(self) -> str:
        return (f"a prompt of {len(self.prompt)} tokens through {self.steps[0].method}, then "
                f"{len(self.steps) - 1} decode steps through {self.steps[-1].method}")


def decode_loop_plan(info: ProgramInfo, layout: LlmLayout, out_dir: Path,
                     steps: int = DEFAULT_DECODE_STEPS) -> DecodeLoop:
    """The loop's executes with their input files in `out_dir`, or one ModelError saying what
    in the layout the loop cannot drive."""
    import numpy as np

    decode = layout.decode
    specs = info.methods[decode.method].inputs
    if decode.ar_len != 1:
        raise ModelError(f"{info.path}: a decode loop feeds {decode.method} one token per "
                         f"execute (ar_len 1), as upstream's runner decodes without lookahead; "
                         f"its tokens input takes {decode.ar_len}")
    mask_dtype = specs[decode.mask].dtype
    if mask_dtype not in MASK_VALUES:
        raise ModelError(f"{info.path}: {decode.method}'s attention mask is {mask_dtype}; "
                         f"upstream's runner writes a mask of {', '.join(MASK_VALUES)} only, "
                         "and nothing says the values of another")
    first = layout.prefill or decode
    count = min(PROMPT_LEN, first.ar_len)
    steps = min(steps, layout.context - count)
    if steps < 1:
        raise ModelError(f"{info.path}: context {layout.context} holds no decode step after a "
                         f"prompt of {count} tokens")
    prompt = tuple((1 + 7 * i) % layout.vocab for i in range(count))
    on, off = MASK_VALUES[mask_dtype]

    def write(method: str, k: int, arrays: dict[int, Any]) -> tuple[TensorFile, ...]:
        files = []
        for i, spec in enumerate(info.methods[method].inputs):
            array = arrays.get(i)
            if array is None:  # an empty cache, or one the runner fills from the last execute
                array = np.zeros(tuple(spec.shape), dtype=numpy_dtype(spec.dtype))
            files.append(write_array(np.asarray(array, dtype=numpy_dtype(spec.dtype))
                                     .reshape(tuple(spec.shape)), out_dir / f"step{k}" / f"in{i}.bin"))
        return tuple(files)

    ar, ctx = first.ar_len, layout.context
    fspecs = info.methods[first.method].inputs
    tokens = np.zeros(ar, dtype=np.int64)
    tokens[:count] = prompt
    if fspecs[first.mask].dtype != mask_dtype:
        raise ModelError(f"{info.path}: {first.method}'s attention mask is "
                         f"{fspecs[first.mask].dtype}, {decode.method}'s {mask_dtype}")
    mask = np.full((ar, ctx), off, dtype=numpy_dtype(mask_dtype))
    for i in range(ar):  # row i attends the new slots up to its own: causal, from empty caches
        mask[i, ctx - ar:ctx - ar + i + 1] = on
    loop = [LoopStep(first.method, write(first.method, 0, {
        first.tokens: tokens, first.mask: mask, first.positions: np.arange(ar)}))]
    caches = tuple((c.input, c.output, 3 if c.kind == "k" else 2) for c in decode.caches)
    for k in range(steps):
        past = count + k  # entries cached before this step's token
        mask = np.full(ctx, off, dtype=numpy_dtype(mask_dtype))
        mask[:past] = on
        mask[ctx - 1] = on
        spec = DecodeSpec(decode.tokens, first.logits if k == 0 else decode.logits,
                          count - 1 if k == 0 else 0, layout.vocab,
                          0 if k == 0 else past - 1, count if k == 0 else 1, caches)
        loop.append(LoopStep(decode.method, write(decode.method, k + 1, {
            decode.mask: mask, decode.positions: np.array([past])}), spec))
    return DecodeLoop(prompt, tuple(loop))
