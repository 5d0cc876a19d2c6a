"""Compiles registry models to `.pte` files, cached on disk.

The cache key covers everything that changes the output: the model's source, the SoC, the
precision, the QNN compile options, the ExecuTorch version, the QNN library version and the
compile worker's own source; a second run with the same key compiles nothing. Compilation runs
in a child process with the QNN environment (see harness.qnn.sdk), forked from a server that
has the lowering stack imported (harness/programs/compile_server.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable

from harness.cache import cache_root, digest, file_lock, file_sha256
from harness.errors import ModelError
from harness.programs.models import ModelSpec
from harness.config.paths import PACKAGE_PARENT
from harness.qnn.sdk import QnnSdk
from harness.runtime import executorch_version
from harness.protocol.tensors import TensorFile

_log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("compile_worker.py")
COMPILE_TIMEOUT_S = 900

# QNN compile options a model may be built with (all off by default):
# - multi_contexts: HTP `use_multi_contexts` (generate_htp_compiler_spec), so contexts of one
#   program can register as one group that reserves a single spill-fill allocation;
# - spill_fill: after lowering, write the program's maximum spill-fill buffer size into every
#   delegate's compile spec (update_spill_fill_size); needs multi_contexts;
# - unplanned_io: inputs and outputs left out of memory planning
#   (MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)), as upstream's QNN
#   LLM flow lowers: the app owns every input and output buffer (the runners bind their own).
# - unnamed_weights (XNNPACK): the delegates carry their weight tensors inline, with no name (the
#   serialized layout older exporters wrote and the runtime still reads), their biases named, so
#   the packed-weight cache is in use but cannot key the packs (XNNWeightsCache::look_up's
#   unnamed exit).
# Each option adds its tag to the cache directory name.
COMPILE_OPTIONS = {"multi_contexts": "mc", "spill_fill": "sf", "unplanned_io": "uio",
                   "online_prepare": "op", "debug_log": "dbg", "shared_buffer": "shb",
                   "unnamed_weights": "unw"}
QNN_ONLY_OPTIONS = ("multi_contexts", "spill_fill", "online_prepare", "debug_log",
                    "shared_buffer")
XNNPACK_ONLY_OPTIONS = ("unnamed_weights",)


def normalize_options(options: dict | None) -> dict[str, bool]:
    """Validated options with the ones left at their default (False) dropped, so `None`, `{}`
    and `{"multi_contexts": False}` are the same build."""
    options = dict(options or {})
    unknown = sorted(k for k in options if k not in COMPILE_OPTIONS)
    if unknown:
        raise ModelError(f"unknown compile option(s) {', '.join(map(repr, unknown))}; known: "
                         f"{', '.join(COMPILE_OPTIONS)}")
    for key, value in options.items():
        if not isinstance(value, bool):
            raise ModelError(f"compile option {key!r} takes True or False, got {value!r}")
    out = {k: True for k in COMPILE_OPTIONS if options.get(k)}
    if out.get("spill_fill") and not out.get("multi_contexts"):
        raise ModelError("compile option 'spill_fill' needs 'multi_contexts': ExecuTorch only "
                         "sets a spill-fill size on delegates lowered with use_multi_contexts")
    return out


def options_tag(options: dict[str, bool]) -> str:
    """The options' part of the cache directory name ("" without options)."""
    return "".join(f"-{COMPILE_OPTIONS[k]}" for k in COMPILE_OPTIONS if options.get(k))


def uses_qnn(backend: str) -> bool:
    """Whether a model's BACKEND ("qnn", "xnnpack", "qnn+xnnpack", ...) has QNN delegates."""
    return "qnn" in backend.split("+")


EAGER_REFERENCE = "eager PyTorch on CPU"


@dataclasses.dataclass(frozen=True)
class MethodReference:
    """A method's fixed inputs and what its executes on them must give.

    A stateful method (one that mutates buffers) has a `sequence`: the expected outputs of its
    1st, 2nd, ... execute since a Module loaded it, carrying the state; `expected` is the
    first. A stateless method's every execute must give `expected`."""

    inputs: tuple[TensorFile, ...]
    expected: tuple[TensorFile, ...]
    sequence: tuple[tuple[TensorFile, ...], ...] = ()
    mutable_buffers: tuple[str, ...] = ()
    # Other input sets of a stateless method, each (inputs, expected): execute variant 1 is
    # variants[0] (`Scenario.execute(..., variant=1)`); two modules executing at once on
    # different inputs must each give their own input's outputs.
    variants: tuple[tuple[tuple[TensorFile, ...], tuple[TensorFile, ...]], ...] = ()
    # A stateful method's executes with its mutable buffers started at zero (what a runtime
    # that never loads the initial value gives), where the reference could compute them.
    zero_start: tuple[tuple[TensorFile, ...], ...] = ()
    # Why the method's outputs have no usable reference, "" when they have one: its solo run,
    # made twice with the heap filled differently, read uninitialised memory
    # (harness.drive.solo). Its executes are then not judged by their outputs; each run that
    # executes it says this once instead (harness.results.failures.undefined_references).
    undefined: str = ""
    # Whether its executes read uninitialised memory on the session's runtime (the words of
    # harness.drive.solo), whatever the reference: their bytes differ from run to run, so a
    # run is never held to another run's bytes (the fault sweep's baseline).
    uninitialised: str = ""

    @property
    def stateful(self) -> bool:
        """Whether its executes carry state, so the n-th must be judged as the n-th."""
        return bool(self.mutable_buffers or self.sequence)

    def expected_at(self, ordinal: int) -> tuple[TensorFile, ...]:
        """The expected outputs of the `ordinal`-th execute (1-based) since the method was
        loaded; beyond a stateful reference's length a ModelError (the reference cannot say)."""
        if not self.sequence:
            return self.expected
        if not 1 <= ordinal <= len(self.sequence):
            raise ModelError(f"the stateful reference covers executes 1..{len(self.sequence)} of "
                             f"a method since its load, not execute {ordinal}")
        return self.sequence[ordinal - 1]


@dataclasses.dataclass(frozen=True)
class CompiledModel:
    """A `.pte` file and the CPU reference of each of its methods."""

    name: str
    backend: str
    soc: str
    precision: str
    pte: Path
    methods: dict[str, MethodReference]
    atol: float
    rtol: float
    options: dict = dataclasses.field(default_factory=dict)  # normalized compile options
    spill_fill_bytes: int | None = None  # from update_spill_fill_size; None without spill_fill
    # Read back from the serialized program: per QNN delegate, its method, use_multi_contexts
    # and max_sf_buf_size (what the runtime sees). Empty for XNNPACK models.
    qnn_delegates: tuple = ()
    # What the expected outputs are: EAGER_REFERENCE for registry models, "the solo run" or
    # an ETRecord for a user's program. Failure messages name it.
    reference: str = EAGER_REFERENCE
    # A model's DECODE_LOOP as compile_worker.decode_loop_reference wrote it: after, method,
    # feed, first_variant, steps (the loop's executes are those variants of `method`); {} for
    # a model without one.
    decode_loop: dict = dataclasses.field(default_factory=dict)
    # Every execute reports its outputs' bytes (Scenario.execute): a user's program whose solo
    # run already disagreed with its meaning, so each mismatch's words can name its pattern
    # (the zero start, another execute's state) in every suite, not only the stateful ones.
    emit_outputs: bool = False

    @property
    def stateful(self) -> bool:
        return any(ref.stateful for ref in self.methods.values())

    @classmethod
    def load(cls, directory: Path) -> CompiledModel:
        meta = json.loads((directory / "meta.json").read_text())
        def tensors(items: list) -> tuple[TensorFile, ...]:
            return tuple(TensorFile.from_json(t, directory) for t in items)

        methods = {
            name: MethodReference(tensors(ref["inputs"]), tensors(ref["expected"]),
                                  tuple(tensors(s) for s in ref.get("sequence", ())),
                                  tuple(ref.get("mutable_buffers", ())),
                                  tuple((tensors(v["inputs"]), tensors(v["expected"]))
                                        for v in ref.get("variants", ())),
                                  tuple(tensors(s) for s in ref.get("zero_start", ())))
            for name, ref in meta["methods"].items()
        }
        return cls(meta["name"], meta["backend"], meta["soc"], meta["precision"],
                   directory / "model.pte", methods, meta["atol"], meta["rtol"],
                   meta.get("options", {}), meta.get("spill_fill_bytes"),
                   tuple(meta.get("qnn_delegates", ())),
                   decode_loop=dict(meta.get("decode_loop") or {}))

    def files(self) -> list[Path]:
        """Every file a runner needs: the program and its reference tensors."""
        out = [self.pte]
        for ref in self.methods.values():
            out += [t.file for t in (*ref.inputs, *ref.expected)]
            out += [t.file for outputs in ref.sequence[1:] for t in outputs]
            out += [t.file for inputs, expected in ref.variants for t in (*inputs, *expected)]
        return out


def cache_key(spec: ModelSpec, soc: str, precision: str, sdk_version: str,
              options: dict | None = None) -> str:
    parts: list[bytes | str] = [spec.path.read_bytes(), soc, precision, executorch_version(), sdk_version,
             WORKER.read_bytes()]
    options = normalize_options(options)
    if options:  # without options the key is what it always was (existing caches stay valid)
        parts.append(json.dumps(options, sort_keys=True))
    return digest(parts)


def cache_dir_name(spec: ModelSpec, soc: str, precision: str, sdk_version: str,
                   options: dict | None = None) -> str:
    options = normalize_options(options)
    return (f"{spec.name}-{soc}-{precision}{options_tag(options)}-"
            f"{cache_key(spec, soc, precision, sdk_version, options)}")


def _cached_entry_ok(out_dir: Path) -> str:
    """"" when the cache entry is whole, else what is wrong with it. The `.pte`'s sha256 is
    recorded when it is built, so a damaged or swapped file is never run as the model."""
    meta_path, pte = out_dir / "meta.json", out_dir / "model.pte"
    if not meta_path.exists() or not pte.exists():
        return "incomplete"
    try:
        recorded = json.loads(meta_path.read_text()).get("pte_sha256")
    except ValueError:
        return "meta.json is unreadable"
    if recorded is None:
        return "no sha256 recorded (made by an older harness)"
    actual = file_sha256(pte)
    if actual != recorded:
        return f"model.pte sha256 {actual[:16]} differs from the recorded {recorded[:16]}"
    return _reference_files_ok(out_dir)


def reference_files_sha256(out_dir: Path) -> dict[str, str]:
    """sha256 of every file of the entry but model.pte (the reference inputs and outputs), by
    path relative to the entry: recorded in meta.json at build time."""
    model = CompiledModel.load(out_dir)
    return {str(f.relative_to(out_dir)): file_sha256(f) for f in model.files()
            if f != model.pte and f.is_relative_to(out_dir)}


def _reference_files_ok(out_dir: Path) -> str:
    """"" when every reference tensor file has the sha256 recorded at build time, else which
    one does not: a zeroed or swapped reference output failed tests as a runtime mismatch
    ("max abs diff 0.457764") and was never repaired. An entry of an older harness (model.pte
    checked, no reference sha256) gets them recorded now, from files that exist."""
    meta_path = out_dir / "meta.json"
    meta = json.loads(meta_path.read_text())
    try:
        model = CompiledModel.load(out_dir)
    except (KeyError, TypeError, ValueError) as exc:
        return f"meta.json does not describe the model ({exc!r})"
    files = [f for f in model.files() if f != model.pte]
    for f in files:
        if not f.is_file():
            return f"{f.relative_to(out_dir) if f.is_relative_to(out_dir) else f} is missing"
    recorded = meta.get("files_sha256")
    if recorded is None:
        meta["files_sha256"] = reference_files_sha256(out_dir)
        tmp = meta_path.with_name("meta.json.tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(meta_path)
        return ""
    for name, sha in sorted(recorded.items()):
        path = out_dir / name
        actual = file_sha256(path) if path.is_file() else "missing"
        if actual != sha:
            return f"{name} sha256 {actual[:16]} differs from the recorded {sha[:16]}"
    return ""


def compile_model(spec: ModelSpec, soc: str, precision: str, sdk: QnnSdk,
                  log_dir: Path | None = None, options: dict | None = None,
                  notice: Callable[[str], None] | None = None) -> CompiledModel:
    """Return the compiled model, from the cache when this exact build was made before.

    `options` are QNN compile options (COMPILE_OPTIONS), e.g. {"multi_contexts": True,
    "spill_fill": True}; an unknown one is a ModelError. A damaged cache entry is rebuilt and
    `notice` (default: a warning) told why."""
    if precision not in spec.precisions:
        raise ModelError(f"model {spec.name} supports precisions {', '.join(spec.precisions)}, "
                         f"not {precision!r}")
    options = normalize_options(options)
    qnn_only = sorted(k for k in options if k in QNN_ONLY_OPTIONS)
    if qnn_only and not uses_qnn(spec.backend):
        raise ModelError(f"model {spec.name} is a {spec.backend} model; compile options "
                         f"{', '.join(qnn_only)} are QNN options")
    xnnpack_only = sorted(k for k in options if k in XNNPACK_ONLY_OPTIONS)
    if xnnpack_only and "xnnpack" not in spec.backend.split("+"):
        raise ModelError(f"model {spec.name} is a {spec.backend} model; compile options "
                         f"{', '.join(xnnpack_only)} are XNNPACK options")
    tag = options_tag(options)
    out_dir = cache_root() / "models" / cache_dir_name(spec, soc, precision, sdk.version, options)
    with file_lock(out_dir.with_suffix(".lock")):
        problem = _cached_entry_ok(out_dir) if out_dir.exists() else "absent"
        if not problem:
            return CompiledModel.load(out_dir)
        if problem != "absent":
            (notice or _warn)(f"compile cache entry {out_dir} is damaged ({problem}): rebuilding "
                              f"{spec.name} for {soc} {precision}{tag}")
        tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
        env = {**os.environ, **sdk.environment()}
        from harness.runtime import current

        # The runtime under test compiles the models where it has a Python package.
        own = current().python_path
        env["PYTHONPATH"] = os.pathsep.join(p for p in (
            str(PACKAGE_PARENT), str(own) if own else "", env.get("PYTHONPATH", "")) if p)
        argv = [str(spec.path), soc, precision, str(tmp_dir)]
        if options:
            argv.append(json.dumps(options, sort_keys=True))
        returncode, log = _run_worker(argv, env, out_dir.with_suffix(".log"))
        if returncode is None:
            raise ModelError(f"compiling {spec.name} for {soc} {precision}{tag} timed out after "
                             f"{COMPILE_TIMEOUT_S} s")
        if log_dir is not None:
            from harness.log import disk_full_tolerated

            with disk_full_tolerated(log_dir, "a compile log"):
                log_dir.mkdir(parents=True, exist_ok=True)
                (log_dir / f"compile-{spec.name}-{soc}-{precision}{tag}.log").write_text(log)
        if returncode != 0 or not (tmp_dir / "meta.json").exists():
            from harness.storage import full_disk_reason

            full = full_disk_reason(log, out_dir.parent)
            if full:  # the reason, not the lowering's log
                raise ModelError(f"compiling {spec.name} for {soc} {precision}{tag} failed: "
                                 f"{full}, or point EXECUTORCH_HIL_CACHE at another disk")
            tail = "\n".join(log.strip().splitlines()[-25:])
            raise ModelError(f"compiling {spec.name} for {soc} {precision}{tag} failed "
                             f"(exit {returncode}):\n{tail}")
        meta_path = tmp_dir / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["pte_sha256"] = file_sha256(tmp_dir / "model.pte")
        meta_path.write_text(json.dumps(meta, indent=1))
        meta["files_sha256"] = reference_files_sha256(tmp_dir)
        meta_path.write_text(json.dumps(meta, indent=1))
        if out_dir.exists():
            import shutil
            shutil.rmtree(out_dir)
        tmp_dir.rename(out_dir)
    return CompiledModel.load(out_dir)


def _run_worker(argv: list[str], env: dict[str, str], log_path: Path) -> tuple[int | None, str]:
    """compile_worker with `argv` in this environment's compile fork server
    (harness/programs/compile_server.py), else in a new process: (exit code or None on a
    timeout, its output)."""
    from harness.programs.compile_server import compile_in_server

    try:
        code = compile_in_server(env, argv, log_path, COMPILE_TIMEOUT_S)
    except TimeoutError:
        return None, ""
    if code is not None:
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        log_path.unlink(missing_ok=True)
        return code, log
    cmd = [sys.executable, "-m", "harness.programs.compile_worker", *argv]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, ""
    return proc.returncode, proc.stdout + proc.stderr


def _warn(message: str) -> None:
    _log.warning("%s", message)
