"""harness.programs.pte: what a `.pte` says it was compiled for, and `python -m harness inspect`.

Every built-in model is compiled once (module fixture; cached on disk by harness.programs.compile) for
each of its precisions, the QNN ones also with the S7 options and linear_relu also for SM8750,
and the program read back must report exactly what the compile asked for. Reading a program
imports executorch (about 5 s), so however warm the caches, three child processes of this file
pay for it: one `inspect --json` over every build with an empty program cache (it inspects each
program in-process), one `read_program` of a good program and one `read_programs` of two good
programs and a damaged one. The other CLI runs are answered from the program cache that first
one filled, without executorch.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.programs import pte as hp
from harness.programs import pte_cache
from harness.programs import pte_reader as pr
from harness.programs.compile import CompiledModel, compile_model
from harness.errors import ModelError
from harness.programs.models import get_model, registry
from harness.programs.pte import (FILE_IDENTIFIER, ProgramInfo, QnnDelegate, TensorSpec, check_file,
                             inspect_program)
from harness.programs.pte_reader import read_program
from harness.qnn.sdk import discover

REPO = Path(__file__).resolve().parents[2]
S7_OPTIONS = {"multi_contexts": True, "spill_fill": True}  # as tests/hil/test_multi_context.py
BACKEND_IDS = {"qnn": "QnnBackend", "xnnpack": "XnnpackBackend"}
SOC_MODELS = {"SM8650": (57, 75), "SM8750": (69, 79)}  # QcomChipset value, HTP arch


def _builds() -> list[tuple[str, str, str, dict]]:
    """(model, soc, precision, options) of every build this file checks."""
    out = [(name, "SM8650", precision, {})
           for name, spec in registry().items() for precision in spec.precisions]
    out += [(name, "SM8650", precision, S7_OPTIONS)
            for name in ("prefill_decode", "prefill_decode_spill") for precision in ("fp16", "int8")]
    out += [("linear_relu", "SM8650", "fp16", {"multi_contexts": True}),
            ("linear_relu", "SM8750", "fp16", {})]
    return out


BUILDS = {"-".join([name, soc, precision, *sorted(options)]): (name, soc, precision, options)
          for name, soc, precision, options in _builds()}


def _env(cache: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if cache is not None:
        env["EXECUTORCH_HIL_CACHE"] = str(cache)
    return env


def _inspect_cli(*args: str, cache: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "inspect", *args], cwd=REPO,
                          env=_env(cache), capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def compiled() -> dict[str, CompiledModel]:
    sdk = discover()
    return {key: compile_model(get_model(name), soc, precision, sdk, options=options)
            for key, (name, soc, precision, options) in BUILDS.items()}


@pytest.fixture(scope="module")
def program_cache(tmp_path_factory) -> Path:
    """A program cache of this module's own, empty before `inspected` fills it."""
    # Only the CLI children get it: the compiled models stay in the shared cache.
    return tmp_path_factory.mktemp("hil-cache")


@pytest.fixture(scope="module")
def inspected(compiled, program_cache) -> dict[str, ProgramInfo]:
    """Every build read by ONE `python -m harness inspect --json` child with an empty program
    cache, so each program goes through inspect_program in that process."""
    keys = list(compiled)
    proc = _inspect_cli(*(str(compiled[k].pte) for k in keys), "--json", cache=program_cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # executorch's import chatter (torchao, torch pytree warnings) is kept off the CLI's stderr.
    assert "Failed to load" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    answers = json.loads(proc.stdout)
    assert len(answers) == len(keys)
    return {key: ProgramInfo.from_json(answer) for key, answer in zip(keys, answers)}


# --- bad input: clear ModelErrors, before anything imports executorch ------------------------

@pytest.fixture
def no_child(monkeypatch):
    """Fail the test if read_program would start its (slow) child process."""
    monkeypatch.setattr(pr, "_run_child", lambda paths, timeout:
                        pytest.fail(f"read_program started a child for {paths}"))


def _real_pte(compiled) -> bytes:
    return compiled["linear_relu-SM8650-fp16"].pte.read_bytes()


BAD_FILES = {
    # name: (contents or None for "do not create", words the message must carry)
    "missing": (None, "no such file"),
    "empty": (b"", "is empty (0 bytes)"),
    "too_short": (b"\x00\x00\x00\x00ET", "too short"),
    "random": (random.Random(0).randbytes(4096), "not an ExecuTorch program"),
    "text": (b"This is not a program, it is a README.\n" * 20, "not an ExecuTorch program"),
    "other_version": (b"\x1c\x00\x00\x00ET11" + bytes(64), "another format version"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file_is_a_model_error_naming_it(case, tmp_path, no_child):
    contents, words = BAD_FILES[case]
    path = tmp_path / f"{case}.pte"
    if contents is not None:
        path.write_bytes(contents)
    for reader in (check_file, read_program, inspect_program):
        with pytest.raises(ModelError) as info:
            reader(path)
        assert str(path) in str(info.value) and words in str(info.value), str(info.value)


def test_directory_is_a_model_error(tmp_path, no_child):
    with pytest.raises(ModelError, match=re.escape(f"{tmp_path}: is a directory")):
        read_program(tmp_path)


def test_unreadable_file_is_a_model_error(tmp_path, monkeypatch, no_child):
    path = tmp_path / "locked.pte"
    path.write_bytes(b"\x1c\x00\x00\x00ET12" + bytes(64))
    if os.geteuid() == 0:  # root reads a mode-000 file, so make open() refuse like the kernel
        def refuse(file, *args, **kwargs):
            if Path(file) == path:
                raise PermissionError(13, "Permission denied", str(file))
            return builtins.open(file, *args, **kwargs)

        monkeypatch.setattr(hp, "open", refuse, raising=False)
    else:
        path.chmod(0)
    with pytest.raises(ModelError, match=re.escape(f"{path}: cannot read the program: "
                                                   f"Permission denied")):
        read_program(path)


@pytest.mark.parametrize("keep", [20, 40, 1000, -1])
def test_truncated_program_is_caught_by_its_header(keep, compiled, tmp_path, no_child):
    """A real program cut anywhere (in the extended header, the flatbuffer or the delegate
    segments) is reported from the sizes its header records, without a child."""
    data = _real_pte(compiled)
    path = tmp_path / "cut.pte"
    path.write_bytes(data[:keep])
    with pytest.raises(ModelError) as info:
        read_program(path)
    assert f"{path}: truncated ExecuTorch program: its header says" in str(info.value)


def _damaged(compiled, tmp_path) -> Path:
    """A real program whose flatbuffer root offset points past the end: every cheap check
    passes, only deserializing finds it."""
    path = tmp_path / "damaged.pte"
    path.write_bytes(b"\xff\xff\xff\x00" + _real_pte(compiled)[4:])
    check_file(path)
    return path


def test_damaged_program_fails_in_the_child_with_a_clean_message(compiled, inspected, tmp_path,
                                                                 monkeypatch):
    """Read in a batch with two good programs: ONE child reads all three, the damaged one is
    its own clean error and the others are read as `inspect` read them."""
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    path = _damaged(compiled, tmp_path)
    good = ["linear_relu-SM8650-fp16", "mixed_qnn_xnnpack-SM8650-fp16"]
    launched = []
    child = pr._run_child
    monkeypatch.setattr(pr, "_run_child",
                        lambda paths, timeout: launched.append(paths) or child(paths, timeout))
    first, damaged, second = pr.read_programs([compiled[good[0]].pte, path,
                                               compiled[good[1]].pte])
    assert len(launched) == 1
    assert [first, second] == [inspected[k] for k in good]
    assert isinstance(damaged, ModelError)
    message = str(damaged)
    assert message.startswith(f"{path}: damaged or truncated ExecuTorch program, it does not "
                              f"deserialize (struct.error: "), message
    assert "Traceback" not in message and "\n" not in message
    assert len(list((tmp_path / "cache").glob("programs/*.json"))) == 2, "an error was cached"


def test_cli_reports_bad_files_and_still_prints_the_good_ones(compiled, inspected, tmp_path,
                                                              program_cache):
    good = compiled["linear_relu-SM8650-fp16"].pte
    missing = tmp_path / "missing.pte"
    proc = _inspect_cli(str(missing), str(good), cache=program_cache)
    assert proc.returncode == 1
    assert f"error: {missing}: no such file" in proc.stderr
    assert str(good) in proc.stdout and "Traceback" not in proc.stderr


# --- what the programs say --------------------------------------------------------------------

def test_file_identifier_is_the_installed_schemas(compiled):
    """FILE_IDENTIFIER (checked without importing executorch) is the installed program.fbs's,
    and real programs carry it at bytes 4..8."""
    import importlib.util

    spec = importlib.util.find_spec("executorch")
    roots = list(spec.submodule_search_locations or [])
    schema = next(Path(r) / "exir" / "_serialize" / "program.fbs" for r in roots
                  if (Path(r) / "exir" / "_serialize" / "program.fbs").exists())
    declared = re.findall(r'file_identifier\s+"([^"]+)"', schema.read_text())
    assert declared == [FILE_IDENTIFIER.decode()] == ["ET12"]
    for model in compiled.values():
        assert model.pte.read_bytes()[4:8] == FILE_IDENTIFIER, model.pte


@pytest.mark.parametrize("key", list(BUILDS))
def test_program_reports_what_the_compile_asked_for(key, compiled, inspected):
    _name, soc, precision, options = BUILDS[key]
    model, info = compiled[key], inspected[key]
    assert info.path == model.pte and info.size == model.pte.stat().st_size
    assert sorted(info.methods) == sorted(model.methods)
    for method, ref in model.methods.items():
        got = info.methods[method]
        assert got.inputs == tuple(TensorSpec(t.dtype, t.shape) for t in ref.inputs), method
        assert got.outputs == tuple(TensorSpec(t.dtype, t.shape) for t in ref.expected), method
        if model.backend == "qnn+xnnpack":  # linear layers to XNNPACK, the activation to QNN
            assert got.delegates == ("XnnpackBackend", "QnnBackend", "XnnpackBackend"), method
        else:
            assert got.delegates == (BACKEND_IDS[model.backend],), method
    assert info.backends == tuple(sorted(BACKEND_IDS[b] for b in model.backend.split("+")))
    if "qnn" not in model.backend.split("+"):
        assert info.qnn_delegates == () and info.socs == () and not info.multi_context
        return
    soc_model, arch = SOC_MODELS[soc]
    assert info.socs == (soc,)
    assert info.multi_context == bool(options.get("multi_contexts"))
    # One QNN delegate per method; what the compile worker read back from the same bytes.
    assert [(d.method, d.use_multi_contexts, d.max_sf_buf_size) for d in info.qnn_delegates] == [
        (d["method"], d["use_multi_contexts"], d["max_sf_buf_size"]) for d in model.qnn_delegates]
    for d in info.qnn_delegates:
        assert (d.soc, d.soc_model, d.htp_arch, d.backend_type) == (soc, soc_model, arch, "htp")
        assert d.use_fp16 is (precision == "fp16")
        assert d.use_multi_contexts is bool(options.get("multi_contexts"))
    if options.get("spill_fill"):
        # The size update_spill_fill_size computed is in the program (on 1.5.1 only in one
        # delegate: known issue qnn-spill-fill-size-last-program-only).
        assert max(d.max_sf_buf_size for d in info.qnn_delegates) == model.spill_fill_bytes
    else:
        assert all(d.max_sf_buf_size == 0 for d in info.qnn_delegates)


def test_spill_model_needs_a_spill_fill_buffer(inspected):
    """The spill model really carries a buffer size (else the S7 checks would be vacuous)."""
    for precision in ("fp16", "int8"):
        info = inspected[f"prefill_decode_spill-SM8650-{precision}-multi_contexts-spill_fill"]
        assert max(d.max_sf_buf_size for d in info.qnn_delegates) > 1 << 20


def test_json_round_trip(inspected):
    for info in inspected.values():
        data = json.loads(json.dumps(info.to_json()))
        assert ProgramInfo.from_json(data) == info
        assert data["backends"] == list(info.backends) and data["socs"] == list(info.socs)


def test_properties_and_describe():
    delegate = QnnDelegate("decode", "SM8650", 57, 75, "htp", True, True, 4096)
    info = ProgramInfo(
        Path("/x/m.pte"), 10, "ab" * 32,
        {"decode": hp.MethodInfo("decode", (TensorSpec("float32", (1, 16)),),
                                 (TensorSpec("float16", (1, 8)),), ("QnnBackend",)),
         "cpu": hp.MethodInfo("cpu", (), (), ())},
        (delegate, QnnDelegate("prefill", "SM8750", 69, 79, "htp", False, False, 0)))
    assert info.backends == ("QnnBackend",) and info.socs == ("SM8650", "SM8750")
    assert info.multi_context
    text = info.describe()
    for words in ("/x/m.pte", "sha256 abababababab", "float32[1, 16]", "float16[1, 8]",
                  "SoC: SM8650, SM8750", "QNN multi-context: yes", "multi-context on",
                  "spill-fill 4096 bytes", "arch v75", "portable CPU ops"):
        assert words in text, f"{words!r} not in\n{text}"
    with pytest.raises(ModelError, match="format"):
        ProgramInfo.from_json({**info.to_json(), "format": 0})


# --- read_program: out of process, cached -----------------------------------------------------

def test_read_program_matches_inspect_and_caches(compiled, inspected, tmp_path, monkeypatch):
    key = "prefill_decode_spill-SM8650-fp16-multi_contexts-spill_fill"
    pte = compiled[key].pte
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    first = read_program(pte)  # a cache miss: inspect_program in a child process
    assert first == inspected[key]
    entry = pte_cache.entry_path(first.sha256)
    assert json.loads(entry.read_text())["sha256"] == first.sha256
    assert not list(entry.parent.glob("*.tmp"))

    monkeypatch.setattr(pr, "_run_child", lambda paths, timeout: pytest.fail("not cached"))
    assert read_program(pte) == first
    copy = tmp_path / "renamed.pte"
    copy.write_bytes(pte.read_bytes())
    assert read_program(copy).path == copy  # same bytes, same entry, the caller's path
    entry.write_text("{half a file")  # a broken entry is a miss, not an error
    monkeypatch.setattr(pr, "_read_in_children", lambda paths: [inspected[key]])
    assert read_program(pte) == first and json.loads(entry.read_text())["format"] == hp.JSON_FORMAT


def test_cli_text_and_json(compiled, inspected, program_cache):
    """With the program cache `inspected` filled, the CLI answers without executorch."""
    key = "prefill_decode_spill-SM8650-fp16-multi_contexts-spill_fill"
    pte, info = compiled[key].pte, inspected[key]
    proc = _inspect_cli(str(pte), str(compiled["xnn_linear_stack-SM8650-fp32"].pte),
                        cache=program_cache)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for words in (str(pte), f"size: {info.size} bytes, sha256 {info.sha256[:12]}",
                  "method prefill:", "inputs:    float32[1, 4096, 256]", "method decode:",
                  "delegates: QnnBackend", "backends: QnnBackend", "SoC: SM8650",
                  "QNN multi-context: yes", "arch v75", "fp16",
                  f"spill-fill {compiled[key].spill_fill_bytes} bytes",
                  "backends: XnnpackBackend", "inputs:    float32[1, 1024]"):
        assert words in out, f"{words!r} not in\n{out}"
    as_json = _inspect_cli(str(pte), "--json", cache=program_cache)
    assert as_json.returncode == 0
    assert [ProgramInfo.from_json(d) for d in json.loads(as_json.stdout)] == [info]


def test_cli_usage():
    proc = _inspect_cli()
    assert proc.returncode == 2 and "usage: python -m harness inspect" in proc.stderr
    help_text = subprocess.run([sys.executable, "-m", "harness", "--help"], cwd=REPO,
                               env=_env(), capture_output=True, text=True).stdout
    assert "inspect PTE" in help_text


# --- mutable buffers: which methods carry state, and who holds it -----------------------------

def test_mutable_buffers_say_which_methods_carry_state_and_who_holds_it(compiled, inspected):
    """A buffer the compile saw mutated is in the program's report, in the delegate that
    holds it (QNN, `skip_mutable_buffer=False`) or in the runtime's planned memory (XNNPACK)."""
    for key, info in inspected.items():
        stateful = sorted(m for m, ref in compiled[key].methods.items() if ref.mutable_buffers)
        assert sorted({b.method for b in info.mutable_buffers}) == stateful, key
    expected = {
        "stateful_accumulator-SM8650-fp16": [("forward", "b_acc", "QnnBackend", True, None, None)],
        "kv_cache-SM8650-fp16": [("forward", "b_k_cache", "QnnBackend", True, None, None)],
        "stateful_accumulator_xnn-SM8650-fp32": [
            ("forward", "value 0", "runtime", False, True, TensorSpec("float32", (16,)))],
        "kv_cache_xnn-SM8650-fp32": [
            ("forward", "value 0", "runtime", False, True, TensorSpec("float32", (1, 8, 4)))],
    }
    for key, rows in expected.items():
        got = [(b.method, b.name, b.holder, b.delegated, b.initialized, b.spec)
               for b in inspected[key].mutable_buffers]
        assert got == rows, key
    assert inspected["linear_relu-SM8650-fp16"].mutable_buffers == ()


def test_cli_says_which_buffers_are_mutable(compiled, inspected, program_cache):
    qnn, xnn = compiled["kv_cache-SM8650-fp16"].pte, compiled["kv_cache_xnn-SM8650-fp32"].pte
    plain = compiled["linear_relu-SM8650-fp16"].pte
    proc = _inspect_cli(str(qnn), str(xnn), str(plain), cache=program_cache)
    assert proc.returncode == 0, proc.stderr
    for words in ("mutable buffer b_k_cache of forward: inside the QnnBackend delegate",
                  "mutable buffer value 0 float32[1, 8, 4] of forward: held by the ExecuTorch "
                  "runtime (planned memory); initial value serialized",
                  "mutable buffers: none"):
        assert words in proc.stdout, f"{words!r} not in\n{proc.stdout}"
    as_json = _inspect_cli(str(qnn), "--json", cache=program_cache)
    assert as_json.returncode == 0, as_json.stderr
    [doc] = json.loads(as_json.stdout)
    assert doc["mutable_buffers"] == [{"method": "forward", "name": "b_k_cache",
                                       "holder": "QnnBackend", "delegated": True,
                                       "initialized": None, "spec": None}]


def test_mutable_buffer_without_initial_value_is_described():
    buffer = hp.MutableBuffer("step", "value 3", "runtime", TensorSpec("int64", (1,)), False)
    assert not buffer.delegated
    assert buffer.describe() == ("mutable buffer value 3 int64[1] of step: held by the ExecuTorch "
                                 "runtime (planned memory); no initial value serialized (its "
                                 "state starts undefined)")
    info = ProgramInfo(Path("/x/s.pte"), 1, "cd" * 32, {}, (), {}, (buffer,))
    assert info.stateful and ProgramInfo.from_json(json.loads(json.dumps(info.to_json()))) == info
