"""The inputs the suites feed a user's program (harness.programs.user): generated integers are
valid indices, a mask the program's metadata describes is built from it, and an input the
runners cannot feed is refused naming program, method, input index and dtype; an output they
cannot describe likewise; an LLM export's decode-loop layout comes from its metadata and
signature, or one error says what is missing."""


import numpy as np
import pytest

from harness.errors import ModelError
from harness.programs.pte import MethodInfo, ProgramInfo, TensorSpec
from harness.programs.user import describe_inputs, input_arrays


def program(tmp_path, inputs, metadata=None) -> ProgramInfo:
    method = MethodInfo("forward", tuple(inputs), (), ("QnnBackend",))
    return ProgramInfo(tmp_path / "p.pte", 1, "0" * 64, {"forward": method}, (), metadata or {})


def test_generated_integers_index_any_dimension(tmp_path):
    info = program(tmp_path, [TensorSpec("float32", (3, 2)), TensorSpec("int64", (5,)),
                              TensorSpec("uint16", (2, 2)), TensorSpec("bool", (4,))])
    floats, index, u16, flags = input_arrays(info)["forward"]
    assert floats.dtype == np.float32 and np.all((floats >= -1) & (floats < 1))
    assert index.dtype == np.int64 and not index.any()  # 0 indexes every non-empty dimension
    assert u16.dtype == np.uint16 and not u16.any()
    assert flags.dtype == np.bool_
    assert "all 0 (a valid index into any non-empty dimension)" in describe_inputs(info)[1]


def test_a_mask_the_metadata_describes_is_causal(tmp_path):
    mask = TensorSpec("uint16", (1, 1, 3, 6))
    info = program(tmp_path, [TensorSpec("int32", (1, 3)), mask], {"get_max_context_len": 6})
    generated = input_arrays(info)["forward"][1]
    assert generated.tolist() == [[[[0, 0, 0, 65535, 0, 0], [0, 0, 0, 65535, 65535, 0],
                                    [0, 0, 0, 65535, 65535, 65535]]]]
    assert "causal attention mask" in describe_inputs(info)[1]
    other = program(tmp_path, [mask], {"get_max_context_len": 8})  # not its context: zeros
    assert not input_arrays(other)["forward"][0].any()


def test_an_input_the_runners_cannot_feed_is_named(tmp_path):
    info = program(tmp_path, [TensorSpec("float32", (2,)), TensorSpec("qint8", (2, 2))])
    with pytest.raises(ModelError, match=r"p.pte: method 'forward' input 1 is a tensor of dtype "
                                         r"qint8 \(qint8\[2, 2\]\), which the runners cannot feed"):
        input_arrays(info)
    assert "cannot be fed" in describe_inputs(info)[1]


def test_an_output_the_runners_cannot_describe_is_refused_naming_it(tmp_path):
    from harness.programs.user import check_outputs

    values = (TensorSpec("double", ()), TensorSpec("string", ()), TensorSpec("intlist", ()),
              TensorSpec("uint8", (1, 4), planned=True))
    good = MethodInfo("get_kv_output_0_quant_attr", (), values, ())
    bad = MethodInfo("get_caches", (), (*values, TensorSpec("tensorlist", ())), ())
    check_outputs(ProgramInfo(tmp_path / "p.pte", 1, "0" * 64, {good.name: good}, ()))
    with pytest.raises(ModelError) as err:
        check_outputs(ProgramInfo(tmp_path / "p.pte", 1, "0" * 64,
                                  {good.name: good, bad.name: bad}, ()))
    assert "method 'get_caches' output 4 is a tensorlist value, which the runners cannot " \
           "describe" in str(err.value)


def llm_program(tmp_path, drop=(), ar=1, heads=2, dim=4, layers=2, ctx=8, vocab=16):
    """A ProgramInfo of upstream's llama-flow layout (decode only), with its metadata."""
    length = ctx - ar
    inputs = [TensorSpec("int32", (1, ar)), TensorSpec("uint16", (1, 1, ar, ctx)),
              TensorSpec("int32", (1, ar))]
    inputs += [TensorSpec("uint8", (1, heads, dim, length))] * layers
    inputs += [TensorSpec("uint8", (1, heads, length, dim))] * layers
    outputs = [TensorSpec("uint16", (1, ar, vocab))]
    outputs += [TensorSpec("uint8", (1, heads, dim, ar))] * layers
    outputs += [TensorSpec("uint8", (1, heads, ar, dim))] * layers
    meta = {"get_max_context_len": ctx, "get_vocab_size": vocab, "get_n_layers": layers,
            "get_n_kv_heads": heads, "get_head_dim": dim, "get_use_kv_cache": True}
    method = MethodInfo("kv_forward", tuple(inputs), tuple(outputs), ("QnnBackend",))
    return ProgramInfo(tmp_path / "llm.pte", 1, "0" * 64, {"kv_forward": method}, (),
                       {k: v for k, v in meta.items() if k not in drop})


def test_an_llm_exports_layout_comes_from_its_metadata_and_signature(tmp_path):
    from harness.programs.llm import llm_layout

    layout = llm_layout(llm_program(tmp_path))
    assert (layout.context, layout.layers, layout.decode.ar_len, layout.decode.cache_len) == \
        (8, 2, 1, 7)
    assert [(c.kind, c.layer, c.input, c.output) for c in layout.decode.caches] == [
        ("k", 0, 3, 1), ("v", 0, 5, 3), ("k", 1, 4, 2), ("v", 1, 6, 4)]
    assert layout.prefill is None


def test_an_llm_export_without_enough_metadata_is_one_error_naming_what_is_missing(tmp_path):
    from harness.programs.llm import llm_layout

    with pytest.raises(ModelError) as err:
        llm_layout(llm_program(tmp_path, drop=("get_head_dim", "get_n_kv_heads")))
    assert "the program has no get_n_kv_heads, get_head_dim" in str(err.value)
    with pytest.raises(ModelError) as err:
        llm_layout(_wrong_cache(tmp_path))
    assert "input 3 (layer 0's key cache) is [1, 2, 4, 7]" in str(err.value)


def _wrong_cache(tmp_path) -> ProgramInfo:
    import dataclasses

    info = llm_program(tmp_path)
    method = info.methods["kv_forward"]
    inputs = list(method.inputs)
    inputs[3] = TensorSpec("uint8", (1, 2, 7, 4))  # a value cache where a key cache belongs
    return dataclasses.replace(info, methods={"kv_forward": dataclasses.replace(
        method, inputs=tuple(inputs))})


def _hybrid(tmp_path, prefill_ar=4, decode_ar=1, mask="uint16") -> ProgramInfo:
    """llm_program with upstream's prefill method beside its decode method."""
    import dataclasses

    decode = llm_program(tmp_path, ar=decode_ar)
    prefill = llm_program(tmp_path, ar=prefill_ar).methods["kv_forward"]
    methods = {"kv_forward": decode.methods["kv_forward"],
               "prefill_forward": dataclasses.replace(prefill, name="prefill_forward")}
    if mask != "uint16":
        methods = {k: dataclasses.replace(m, inputs=(m.inputs[0], TensorSpec(
            mask, m.inputs[1].shape), *m.inputs[2:])) for k, m in methods.items()}
    return dataclasses.replace(decode, methods=methods)


def _read(t):
    from harness.protocol.tensors import numpy_dtype

    return np.fromfile(t.file, dtype=numpy_dtype(t.dtype)).reshape(t.shape)


@pytest.mark.unit
def test_a_decode_loop_prefills_its_prompt_then_decodes_one_token_per_step(tmp_path):
    """As upstream's runner drives the layout: the prompt in the prefill's first rows with a
    causal mask over the new slots; then per step the position moved on, the mask attending
    the cached entries and the new slot, and the runner told to write the previous execute's
    new entries after the cached ones (the prompt's all at once, then one per step)."""
    from harness.programs.llm import decode_loop_plan, llm_layout

    info = _hybrid(tmp_path)
    plan = decode_loop_plan(info, llm_layout(info), tmp_path / "loop", steps=3)
    assert plan.prompt == (1, 8, 15, 6)  # (1 + 7 i) mod vocab 16
    first = plan.steps[0]
    assert first.method == "prefill_forward" and first.decode is None
    assert _read(first.inputs[0]).tolist() == [[1, 8, 15, 6]]
    assert _read(first.inputs[2]).tolist() == [[0, 1, 2, 3]]
    assert _read(first.inputs[1])[0, 0, 1].tolist() == [0, 0, 0, 0, 65535, 65535, 0, 0]
    assert [s.method for s in plan.steps[1:]] == ["kv_forward"] * 3
    d0, d1 = plan.steps[1].decode, plan.steps[2].decode
    assert (d0.token, d0.logits, d0.row, d0.vocab, d0.past, d0.new) == (0, 0, 3, 16, 0, 4)
    assert (d1.row, d1.past, d1.new) == (0, 4, 1)
    assert d0.caches == ((3, 1, 3), (5, 3, 2), (4, 2, 3), (6, 4, 2))  # k on axis 3, v on 2
    assert _read(plan.steps[2].inputs[2]).tolist() == [[5]]
    assert _read(plan.steps[2].inputs[1]).reshape(-1).tolist() == [65535] * 5 + [0, 0, 65535]


@pytest.mark.unit
def test_a_decode_loop_the_layout_cannot_drive_is_one_error_saying_why(tmp_path):
    from harness.programs.llm import decode_loop_plan, llm_layout

    info = _hybrid(tmp_path, decode_ar=2)
    with pytest.raises(ModelError, match=r"one token per execute.*takes 2"):
        decode_loop_plan(info, llm_layout(info), tmp_path / "a")
    info = _hybrid(tmp_path, mask="int32")
    with pytest.raises(ModelError, match="attention mask is int32; upstream's runner writes a "
                                         "mask of uint16, uint8, float32 only"):
        decode_loop_plan(info, llm_layout(info), tmp_path / "b")
    decode_only = llm_program(tmp_path)
    plan = decode_loop_plan(decode_only, llm_layout(decode_only), tmp_path / "c", steps=100)
    assert plan.prompt == (1,) and len(plan.steps) == 1 + 7  # the context holds 7 more
