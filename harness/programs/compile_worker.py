"""Child-process entry that lowers one model to a `.pte` and writes its CPU reference.

Runs in its own process because the QNN libraries must be on LD_LIBRARY_PATH before the
process starts (see harness.qnn.sdk). Usage (called by harness.programs.compile, not by hand):

    python -m harness.programs.compile_worker <model.py> <soc> <precision> <out_dir> [<options json>]

Options (validated by harness.programs.compile): {"multi_contexts": true} lowers with the HTP option
use_multi_contexts; {"spill_fill": true} then writes the programs' maximum spill-fill buffer
size into every QNN delegate's compile spec and prints it as "spill-fill buffer size: N bytes";
{"unplanned_io": true} leaves inputs and outputs out of memory planning; {"online_prepare": true}
carries the QNN graph (DLC) instead of a context binary; {"debug_log": true} sets the program's
QNN log level to kLogLevelDebug; {"shared_buffer": true} expects inputs and outputs in QNN
shared memory; {"unnamed_weights": true} writes an XNNPACK program's weight tensors inline in its
delegates, without names.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import sys
from pathlib import Path

STATE_EXECUTES = 8
"""How many executes of one method, from a fresh Module, a stateful program's reference covers:
the expected outputs of the 1st, 2nd, ... execute since the method was loaded (eager PyTorch
carrying the buffers' state through the same sequence of executes on the same inputs)."""


def load_model_module(path: Path):
    spec = importlib.util.spec_from_file_location(f"harness_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the model file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quantize(module, inputs):
    import torch
    from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    graph = torch.export.export(module, inputs, strict=True).module()
    prepared = prepare_pt2e(graph, QnnQuantizer())
    prepared(*inputs)  # calibration on the example inputs
    return convert_pt2e(prepared)


def mutable_buffers(module, inputs) -> list[str]:
    """The buffers a method mutates (torch.export's graph signature): a stateful method."""
    import torch

    # The export keeps in-place ops; its functional form names the mutated buffers.
    exported = torch.export.export(copy.deepcopy(module), inputs, strict=True).run_decompositions({})
    return sorted(set(exported.graph_signature.buffers_to_mutate.values()))


def backend_config(buffers: list[str], unplanned_io: bool = False):
    """The ExecuTorch emit config: it serializes the initial value of `buffers` (without it
    ExecuTorch gives a mutated buffer "a meaningless initial state, only the shape and dtype
    will be serialized", the emitter's words, so eager PyTorch would not be the program's
    meaning), and with `unplanned_io` leaves the methods' inputs and outputs out of memory
    planning, as upstream's QNN LLM flow does (the app binds its own buffers)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    if not buffers and not unplanned_io:
        return None
    kwargs: dict = {}
    if buffers:
        kwargs["passes"] = [InitializedMutableBufferPass(sorted(set(buffers)))]
    if unplanned_io:
        kwargs["memory_planning_pass"] = MemoryPlanningPass(alloc_graph_input=False,
                                                            alloc_graph_output=False)
    return ExecutorchBackendConfig(**kwargs)


def lower_qnn(methods: dict, soc: str, precision: str, options: dict | None = None,
              facts: dict | None = None, buffers: tuple[str, ...] = ()) -> bytes:
    """Lower to QNN; `facts` (if given) receives what the build learned (spill-fill size)."""
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        get_soc_to_chipset_map,
        to_edge_transform_and_lower_to_qnn,
        update_spill_fill_size,
    )

    options = options or {}

    chipsets = get_soc_to_chipset_map()
    if soc not in chipsets:
        raise SystemExit(f"unknown SoC {soc!r} for the QNN compiler; known: {', '.join(sorted(chipsets))}")
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=chipsets[soc],
        backend_options=generate_htp_compiler_spec(
            use_fp16=precision == "fp16",
            use_multi_contexts=bool(options.get("multi_contexts"))),
        # The delegate carries the QNN graph (DLC), not a context binary: the runtime composes
        # and finalizes the graph at load time (QnnManager::CompileDlc).
        online_prepare=bool(options.get("online_prepare")),
        # QNN log level kLogLevelDebug instead of kLogLevelError: the runtime creates its QNN
        # logger at the program's level.
        debug=bool(options.get("debug_log")),
        # Graph inputs and outputs the app places in QNN shared memory (rpcmem): the delegate
        # registers them with QnnMem_register instead of copying.
        shared_buffer=bool(options.get("shared_buffer")),
    )
    modules = {name: (_quantize(m, x) if precision == "int8" else m) for name, (m, x) in methods.items()}
    inputs = {name: x for name, (_, x) in methods.items()}
    # A model may keep its mutable buffers out of the QNN delegate (the runtime holds them and
    # the delegate computes): upstream's skip_mutable_buffer=True.
    skip = {"skip_mutable_buffer": True} if options.get("runtime_held_buffers") else {}
    if list(methods) == ["forward"]:
        edge = to_edge_transform_and_lower_to_qnn(modules["forward"], inputs["forward"], specs,
                                                  **skip)
    else:
        edge = to_edge_transform_and_lower_to_qnn(modules, inputs, specs, **skip)
    if options.get("spill_fill"):
        # One call over all methods, as the API intends: it computes the largest spill-fill
        # buffer any delegate's context needs and should write it into every delegate's compile
        # spec (max_sf_buf_size). What each delegate really carries is read back from the
        # serialized program (meta "qnn_delegates"), so a compiler that misses some is caught
        # by the tests, not papered over here.
        programs = [edge.exported_program(name) for name in methods]
        size = int(update_spill_fill_size(programs))
        print(f"spill-fill buffer size: {size} bytes (methods {', '.join(methods)})", flush=True)
        if facts is not None:
            facts["spill_fill_bytes"] = size
    return edge.to_executorch(backend_config(list(buffers),
                                             bool(options.get("unplanned_io")))).buffer


def qnn_delegate_specs(buffer: bytes) -> list[dict]:
    """Read the serialized program back: each QNN delegate's method, the HTP options and the
    SoC model its compile spec carries (what the runtime will see), in plan order."""
    from executorch.backends.qualcomm.serialization.qc_schema_serialize import flatbuffer_to_option
    from executorch.backends.qualcomm.utils.constants import QCOM_QNN_COMPILE_SPEC
    from executorch.exir._serialize._program import deserialize_pte_binary

    out = []
    for plan in deserialize_pte_binary(buffer).program.execution_plan:
        for delegate in plan.delegates:
            for spec in delegate.compile_specs:
                if spec.key != QCOM_QNN_COMPILE_SPEC:
                    continue
                option = flatbuffer_to_option(spec.value)
                htp = option.backend_options.htp_options
                out.append({"method": plan.name, "use_multi_contexts": bool(htp.use_multi_contexts),
                            "max_sf_buf_size": int(htp.max_sf_buf_size),
                            # QcomChipset: what the runtime asks the QNN device for
                            "soc_model": int(option.soc_info.soc_model)})
    return out


def lower_mixed(methods: dict, soc: str, precision: str, skip_ops: tuple[str, ...]) -> bytes:
    """QNN first, told to leave `skip_ops` alone, then XNNPACK for what is left: one program
    whose methods run delegates of both backends."""
    import torch
    from executorch.backends.qualcomm.partition.qnn_partitioner import QnnPartitioner
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        get_soc_to_chipset_map,
    )
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    if precision != "fp16":
        raise SystemExit(f"mixed QNN+XNNPACK programs are built in fp16 only, not {precision}")
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()[soc],
        backend_options=generate_htp_compiler_spec(use_fp16=True))
    programs = {name: torch.export.export(m, x, strict=True) for name, (m, x) in methods.items()}
    partitioners = [QnnPartitioner(specs, skip_node_op_set=set(skip_ops)), XnnpackPartitioner()]
    edge = to_edge_transform_and_lower(programs, partitioner=partitioners)
    return edge.to_executorch().buffer


def lower_xnnpack(methods: dict, buffers: tuple[str, ...] = (), unplanned_io: bool = False,
                  unnamed_weights: bool = False) -> bytes:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    programs = {name: torch.export.export(m, x, strict=True) for name, (m, x) in methods.items()}
    with inline_xnnpack_weights() if unnamed_weights else contextlib.nullcontext():
        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch(backend_config(list(buffers), unplanned_io)).buffer


@contextlib.contextmanager
def inline_xnnpack_weights():
    """XNNPACK delegates lowered in the block carry their weight tensors (constants of two or
    more dimensions) inline, with no name; biases keep theirs.

    executorch 1.5.1's exporter names every constant (the sha256 of its bytes, in the program's
    named data) and its runtime still reads the older layout, where a `ConstantDataOffset` has
    an offset into the delegate's own constant segment and no `named_key` (XNNCompiler.cpp,
    getConstantDataPtr). The exporter's own serializer writes that segment
    (`serialize_xnnpack_binary(graph, constant_data_bytes)`); here the bytes a node visitor
    hands the named data store are held, and the weights' are written there instead. The
    biases stay named because a delegate with no named data at all never hands XNNPACK the
    weights cache (XNNCompiler.cpp, compileModel: `get_num_unpacked_data() > 0`), so its packs
    would not pass through the cache."""
    from executorch.backends.xnnpack import xnnpack_preprocess
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import (
        CONSTANT_TENSOR_ALIGNMENT)
    from executorch.exir._serialize._named_data_store import NamedDataStore

    held: dict[str, tuple] = {}
    inside: list[bool] = [False]  # between a preprocess's node visitors and its serializing
    real_add, real_serialize = NamedDataStore.add_named_data, xnnpack_preprocess.serialize_xnnpack_binary
    real_visitors = xnnpack_preprocess.get_node_visitors

    def get_node_visitors(*args, **kwargs):
        inside[0] = True
        return real_visitors(*args, **kwargs)

    def add_named_data(self, key, data, alignment=1, external_tag=None, tensor_layout=None):
        if not inside[0]:  # the program's own store (merging the delegates' data)
            return real_add(self, key, data, alignment, external_tag, tensor_layout)
        held[key] = (self, bytes(data), alignment, external_tag, tensor_layout)

    def serialize(graph, constant_data_bytes):
        inside[0] = False
        rank = {}
        for value in graph.xvalues:
            tensor = getattr(value.xvalue_union, "tensor_value", value.xvalue_union)
            if getattr(tensor, "constant_buffer_idx", 0):
                rank[tensor.constant_buffer_idx] = len(tensor.dims)
        for index, entry in enumerate(graph.constant_data):
            if not entry.named_key:
                continue
            store, data, alignment, tag, layout = held[entry.named_key]
            if rank.get(index, 0) < 2:  # a bias (or a scalar): named, as the exporter does
                real_add(store, entry.named_key, data, alignment, tag, layout)
                continue
            constant_data_bytes += b"\0" * (-len(constant_data_bytes) % CONSTANT_TENSOR_ALIGNMENT)
            entry.offset = len(constant_data_bytes)
            constant_data_bytes += data
            entry.named_key = None  # absent from the flatbuffer, not an empty string
        return real_serialize(graph, constant_data_bytes)

    NamedDataStore.add_named_data = add_named_data
    xnnpack_preprocess.serialize_xnnpack_binary = serialize
    xnnpack_preprocess.get_node_visitors = get_node_visitors
    try:
        yield
    finally:
        NamedDataStore.add_named_data = real_add
        xnnpack_preprocess.serialize_xnnpack_binary = real_serialize
        xnnpack_preprocess.get_node_visitors = real_visitors


def _as_tuple(outputs) -> tuple:
    """A method's outputs as a tuple (one tensor is one output)."""
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def zero_start_sequence(module, inputs, buffers: list[str], out_dir: Path,
                        name: str) -> list[list[dict]]:
    """What the executes of a stateful method give when its mutable buffers start at zero
    instead of their initial value: the signature of a runtime that never loaded the initial
    value (harness.results.failures names it in a mismatch's words). [] for a stateless one."""
    import torch

    if not buffers:
        return []
    copy_ = copy.deepcopy(module)
    named = dict(copy_.named_buffers())
    with torch.no_grad():
        for buffer in buffers:
            if buffer in named:
                named[buffer].zero_()
        return [_saved(_as_tuple(copy_(*inputs)), out_dir, f"{name}_z{n}_out")
                for n in range(STATE_EXECUTES)]


def _saved(tensors, out_dir: Path, stem: str) -> list[dict]:
    """`tensors` written as ref/<stem><index>.bin: the meta's entries for them."""
    from harness.protocol.tensors import save_tensor

    return [save_tensor(t, out_dir / "ref" / f"{stem}{i}.bin").to_json(out_dir)
            for i, t in enumerate(tensors)]


def input_variant(module, inputs, outputs) -> tuple[tuple, tuple] | None:
    """A second input set of a stateless method, with its eager outputs: each floating input's
    elements in another order (seeded), so the values stay in the range the program was
    calibrated on while the outputs differ. Two modules executing at once on different inputs
    each need their own expected outputs (tests/hil/test_concurrent_execute.py). None when an
    input is not floating point or the outputs would not differ."""
    import torch

    if not inputs or not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in inputs):
        return None
    generator = torch.Generator().manual_seed(1)
    shuffled = tuple(t.flatten()[torch.randperm(t.numel(), generator=generator)].reshape(t.shape)
                     .contiguous() for t in inputs)
    got = _as_tuple(module(*shuffled))
    if all(torch.equal(a, b) for a, b in zip(got, outputs)):
        return None
    return shuffled, got


def decode_loop_reference(loop: dict, eager: dict, reference: dict, out_dir: Path) -> dict:
    """The eager chain of a decode loop (a model's DECODE_LOOP: after `after` executes once,
    `steps` executes of `method`, each fed, by `feed`'s (input, output) pairs, the outputs of
    the execute before it), as variants of `method`: step k's inputs with the fed ones set to
    eager's outputs of step k - 1, and its eager outputs. A runner feeds the runtime's own
    outputs instead (the step's `feed`) and compares with these."""
    import torch

    after, method, feed, steps = loop["after"], loop["method"], loop["feed"], int(loop["steps"])
    module, inputs = eager[method]
    with torch.no_grad():
        prev = _as_tuple(eager[after][0](*eager[after][1]))
        variants = reference[method].setdefault("variants", [])
        first = len(variants) + 1
        for k in range(steps):
            fed = list(inputs)
            for i, o in feed:
                fed[i] = prev[o]
            got = _as_tuple(module(*fed))
            variants.append({"inputs": _saved(fed, out_dir, f"{method}_loop{k}_in"),
                             "expected": _saved(got, out_dir, f"{method}_loop{k}_out")})
            prev = got
    return {"after": after, "method": method, "feed": [list(p) for p in feed],
            "first_variant": first, "steps": steps}


def main(argv: list[str]) -> int:
    model_path, soc, precision = Path(argv[0]).absolute(), argv[1], argv[2]
    out_dir = Path(argv[3]).absolute()
    options = json.loads(argv[4]) if len(argv) > 4 else {}
    facts: dict = {}
    # The QNN lowering writes files into the working directory (an online-prepare build its
    # `<method>.dlc`): they belong in the build's own directory, not the caller's.
    out_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(out_dir)
    import torch

    model = load_model_module(model_path)
    methods = model.build()
    # Fresh copies before lowering touches anything: the reference starts from the initial state.
    eager = {name: (copy.deepcopy(m), x) for name, (m, x) in methods.items()}
    mutated = {name: mutable_buffers(m, x) for name, (m, x) in eager.items()}
    buffers = tuple(b for names in mutated.values() for b in names)
    if getattr(model, "QNN_RUNTIME_HELD_BUFFERS", False):
        options = {**options, "runtime_held_buffers": True}
    if model.BACKEND == "qnn":
        buffer = lower_qnn(methods, soc, precision, options, facts, buffers)
        facts["qnn_delegates"] = qnn_delegate_specs(buffer)
    elif model.BACKEND == "xnnpack":
        buffer = lower_xnnpack(methods, buffers, bool(options.get("unplanned_io")),
                               bool(options.get("unnamed_weights")))
    elif model.BACKEND == "qnn+xnnpack":
        buffer = lower_mixed(methods, soc, precision, tuple(getattr(model, "QNN_SKIP_OPS", ())))
        facts["qnn_delegates"] = qnn_delegate_specs(buffer)
    else:
        raise SystemExit(f"model {model.NAME}: unknown BACKEND {model.BACKEND!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "model.pte").write_bytes(buffer)
    reference: dict[str, dict] = {}
    with torch.no_grad():
        for name, (module, inputs) in eager.items():
            runs = STATE_EXECUTES if mutated[name] else 1
            zero_start = zero_start_sequence(module, inputs, mutated[name], out_dir, name)
            sequence = []
            for n in range(runs):
                outputs = _as_tuple(module(*inputs))
                tag = "" if n == 0 else f"_s{n}"
                sequence.append(_saved(outputs, out_dir, f"{name}{tag}_out"))
            reference[name] = {"inputs": _saved(inputs, out_dir, f"{name}_in"),
                               "expected": sequence[0]}
            if mutated[name]:
                reference[name]["mutable_buffers"] = mutated[name]
                reference[name]["sequence"] = sequence
                reference[name]["zero_start"] = zero_start
            else:
                variant = input_variant(module, inputs, outputs)
                if variant is not None:
                    v_inputs, v_outputs = variant
                    reference[name]["variants"] = [{
                        "inputs": _saved(v_inputs, out_dir, f"{name}_v1_in"),
                        "expected": _saved(v_outputs, out_dir, f"{name}_v1_out")}]
    loop = getattr(model, "DECODE_LOOP", None)
    if loop:
        facts["decode_loop"] = decode_loop_reference(loop, eager, reference, out_dir)
    atol, rtol = model.TOLERANCE.get(precision, (1e-3, 1e-3))
    meta = {"name": model.NAME, "backend": model.BACKEND, "soc": soc, "precision": precision,
            "methods": reference, "atol": atol, "rtol": rtol, "pte_bytes": len(buffer)}
    if options:
        meta["options"] = options
    meta.update(facts)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
