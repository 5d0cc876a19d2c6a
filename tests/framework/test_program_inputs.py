"""The inputs the suites feed a user's program (harness.programs.user): generated integers are
valid indices, a mask the program's metadata describes is built from it, and an input the
runners cannot feed is refused naming program, method, input index and dtype."""


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
