"""QNN compile options: validation, cache key and cache directory name (no compile runs)."""

import json

import pytest

from harness.programs import compile as hc
from harness.programs.compile import (CompiledModel, cache_dir_name, cache_key, compile_model,
                             normalize_options)
from harness.errors import ModelError
from harness.programs.models import get_model
from harness.session import HilSession


@pytest.fixture
def spec():
    return get_model("prefill_decode")


def test_defaults_are_the_same_build():
    assert normalize_options(None) == normalize_options({}) == {}
    assert normalize_options({"multi_contexts": False, "spill_fill": False}) == {}
    assert normalize_options({"spill_fill": True, "multi_contexts": True}) == {
        "multi_contexts": True, "spill_fill": True}


@pytest.mark.parametrize("options, words", [
    ({"multicontext": True}, "unknown compile option(s) 'multicontext'"),
    ({"multi_contexts": 1}, "takes True or False"),
    ({"spill_fill": True}, "'spill_fill' needs 'multi_contexts'"),
])
def test_bad_options_are_model_errors(options, words):
    with pytest.raises(ModelError) as info:
        normalize_options(options)
    assert words in str(info.value)


def test_key_without_options_is_unchanged(spec):
    base = cache_key(spec, "SM8650", "fp16", "2.37")
    assert cache_key(spec, "SM8650", "fp16", "2.37", {}) == base
    assert cache_key(spec, "SM8650", "fp16", "2.37", {"multi_contexts": False}) == base
    mc = cache_key(spec, "SM8650", "fp16", "2.37", {"multi_contexts": True})
    both = cache_key(spec, "SM8650", "fp16", "2.37", {"multi_contexts": True, "spill_fill": True})
    assert len({base, mc, both}) == 3


def test_directory_name_carries_options(spec):
    plain = cache_dir_name(spec, "SM8650", "int8", "2.37")
    tagged = cache_dir_name(spec, "SM8650", "int8", "2.37",
                            {"multi_contexts": True, "spill_fill": True})
    assert plain.startswith("prefill_decode-SM8650-int8-") and "-mc" not in plain
    assert tagged.startswith("prefill_decode-SM8650-int8-mc-sf-")


def test_compile_model_rejects_before_compiling(spec, monkeypatch):
    monkeypatch.setattr(hc.subprocess, "run", lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(ModelError, match="unknown compile option"):
        compile_model(spec, "SM8650", "fp16", sdk=None, options={"bogus": True})
    with pytest.raises(ModelError, match="are QNN options"):
        compile_model(get_model("xnn_linear_stack"), "SM8650", "fp32", sdk=None,
                      options={"multi_contexts": True})
    with pytest.raises(ModelError, match="are XNNPACK options"):
        compile_model(spec, "SM8650", "fp16", sdk=None, options={"unnamed_weights": True})


def test_session_model_rejects_unknown_option_without_sdk(tmp_path):
    session = HilSession.__new__(HilSession)
    session._models = {}
    session._sdk = None
    session._device = None
    session.options = None  # never reached: validation comes first
    with pytest.raises(ModelError, match="unknown compile option"):
        session.model("prefill_decode", "fp16", {"spillfill": True})


def test_compiled_model_reads_options_and_delegates(tmp_path):
    meta = {"name": "m", "backend": "qnn", "soc": "SM8650", "precision": "fp16", "methods": {},
            "atol": 0.1, "rtol": 0.1, "options": {"multi_contexts": True, "spill_fill": True},
            "spill_fill_bytes": 4096,
            "qnn_delegates": [{"method": "forward", "use_multi_contexts": True,
                               "max_sf_buf_size": 4096}]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    model = CompiledModel.load(tmp_path)
    assert model.options == {"multi_contexts": True, "spill_fill": True}
    assert model.spill_fill_bytes == 4096 and model.qnn_delegates[0]["max_sf_buf_size"] == 4096
    del meta["options"], meta["spill_fill_bytes"], meta["qnn_delegates"]
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    old = CompiledModel.load(tmp_path)
    assert old.options == {} and old.spill_fill_bytes is None and old.qnn_delegates == ()
