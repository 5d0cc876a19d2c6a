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
