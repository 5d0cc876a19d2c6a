"""A user's program judged by what it means: the edge program of its ETRecord, run on CPU.

A `.pte` given with `--pte` has no eager model, and its own solo run cannot see a runtime that
is consistently wrong (a stateful program whose delegate drops the buffer's initial value
agrees with itself). Upstream's devtools write an ETRecord beside the program
(`to_edge_transform_and_lower_to_qnn(..., generate_etrecord=True)`, then
`program.get_etrecord().save(path)`); its `edge_dialect_program` (one ExportedProgram, or a
dict of them per method) runs on CPU and carries buffer mutations across calls. This module
finds the ETRecord (`NAME.etrecord` beside `NAME.pte`, or `--etrecord`) and runs each method
`STATE_EXECUTES` times on the suites' inputs, in a child process (it imports torch and exir),
giving the expected outputs of the 1st, 2nd, ... execute since a Module loaded the method,
and of a stateful method the same executes with its mutable buffers started at zero (what a
runtime gives where the program serializes no initial value and its memory is fresh).

    python -m harness.programs.etrecord RECORD REQUEST.json OUT_DIR   (called by the session)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from harness.config.paths import PACKAGE_PARENT
from harness.errors import ModelError
from harness.programs.compile import MethodReference
from harness.protocol.tensors import TensorFile

STATE_EXECUTES = 8
"""Executes per method the reference covers (a scenario's executes of one method since a load)."""
SUFFIX = ".etrecord"
CHILD_TIMEOUT_S = 600
CHILD_ERROR_EXIT = 3


def etrecord_for(pte: Path, given: dict[Path, Path] | None = None) -> Path | None:
    """The ETRecord of `pte`: the one `--etrecord` gave, else `NAME.etrecord` beside it, else
    None (the program then has no known meaning and is judged against its solo run). A given
    file that does not exist is a ModelError."""
    pte = Path(pte).resolve()
    record = (given or {}).get(pte)
    if record is not None:
        if not Path(record).is_file():
            raise ModelError(f"--etrecord {record} (for {pte}): no such file")
        return Path(record)
    beside = pte.with_suffix(SUFFIX)
    return beside if beside.is_file() else None


def etrecord_problem(record: Path) -> str:
    """What makes `record` no readable ETRecord, "" when nothing: checked once at start-up,
    without torch, from what ETRecord.save writes (a zip archive with an `ETRECORD_*` entry
    and the edge programs), each member's CRC included. A truncated or overwritten record was
    one error per test, each with the child's traceback."""
    import zipfile

    try:
        if not zipfile.is_zipfile(record):
            return "not an ETRecord: no zip archive, as ETRecord.save writes (truncated or " \
                "overwritten?)"
        with zipfile.ZipFile(record) as archive:
            names = archive.namelist()
            if not any(n.startswith("ETRECORD") for n in names):
                return "not a whole ETRecord: the archive has no ETRECORD_* entry"
            if not any(n.startswith("edge_dialect_exported_program/") for n in names):
                return "the ETRecord has no edge_dialect_program (save it from the " \
                    "EdgeProgramManager the program was lowered from)"
            bad = archive.testzip()
            if bad is not None:
                return f"the ETRecord is damaged: its member {bad} fails its CRC check"
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        return f"cannot be read as an ETRecord ({exc})"
    return ""


def describe(record: Path) -> str:
    """The reference's name in failure messages."""
    return f"the ETRecord {record} (its edge program on CPU)"


def etrecord_references(record: Path, inputs: dict[str, tuple[tuple[TensorFile, ...], ...]],
                        out_dir: Path) -> dict[str, MethodReference]:
    """Per method of `inputs` (its input sets: of executes 1, 2, ... since a load, the last
    one for every later execute; MethodReference.input_sequence), its reference from the
    ETRecord's edge program: the expected outputs of executes 1..STATE_EXECUTES on those
    inputs (a `sequence` when the method mutates buffers, else one `expected`). Runs in a
    child process; a record that cannot be read, lacks a method or does not run on the inputs
    is a ModelError naming it.

    The child's answer and output files are kept in the harness cache (`harness.cache.memo`)
    by what they depend on: the record's bytes, every input tensor's bytes, this module's code
    and the runtime and torch that run it. Each session, and each xdist worker of one, asked
    the same question again at the cost of a torch import and the edge program's runs (about
    7 s of CPU); an error is never kept, so a failing record fails again in its own words."""
    from harness.cache import memo

    out_dir.mkdir(parents=True, exist_ok=True)
    request = {name: [[t.to_json(out_dir) for t in tensors] for tensors in sets]
               for name, sets in inputs.items()}
    answer, files = memo("etrecord-references", _reference_key(record, inputs),
                         lambda: _child_answer(record, request, out_dir))
    for relative, data in files.items():
        target = out_dir / relative
        if not target.is_file() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    refs = {}
    for name, method in answer["methods"].items():
        sequence = tuple(tuple(TensorFile.from_json(t, out_dir) for t in outputs)
                         for outputs in method["sequence"])
        stateful = bool(method["mutable_buffers"])
        zero = tuple(tuple(TensorFile.from_json(t, out_dir) for t in outputs)
                     for outputs in method.get("zero_start") or ())
        sets = inputs[name]
        refs[name] = MethodReference(sets[0], sequence[0], sequence if stateful else (),
                                     tuple(method["mutable_buffers"]), zero_start=zero,
                                     input_sequence=sets if stateful and len(sets) > 1 else ())
    return refs


def _reference_key(record: Path, inputs: dict[str, tuple[tuple[TensorFile, ...], ...]]
                   ) -> list[bytes | str]:
    """Everything the child's answer depends on (see etrecord_references)."""
    import importlib.metadata

    from harness.cache import file_sha256
    from harness.runtime import current

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    key: list[bytes | str] = [Path(__file__).read_bytes(), file_sha256(record),
                              repr(current()), torch_version, sys.executable]
    for name in sorted(inputs):
        key.append(name)
        for tensors in inputs[name]:
            key.append(str(len(tensors)))
            for t in tensors:
                key += [t.dtype, repr(tuple(t.shape)), Path(t.file).read_bytes()]
    return key


def _child_answer(record: Path, request: dict[str, list], out_dir: Path
                  ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The child's answer and the bytes of the output files it names (relative to
    `out_dir`); a ModelError when it fails."""
    from harness.process import run_process

    request_file = out_dir / "request.json"
    request_file.write_text(json.dumps(request))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    from harness.runtime import current

    own = current().python_path
    if own:
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(own)])
    out = run_process([sys.executable, "-m", "harness.programs.etrecord", str(record),
                       str(request_file), str(out_dir)], env, CHILD_TIMEOUT_S)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    answer = json.loads(lines[-1]) if lines else None
    if out.timed_out:
        raise ModelError(f"{record}: running the ETRecord's edge program timed out after "
                         f"{CHILD_TIMEOUT_S} s")
    if out.returncode == CHILD_ERROR_EXIT and answer and "error" in answer:
        raise ModelError(f"{record}: {answer['error']}")
    if out.returncode != 0 or answer is None:
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
        raise ModelError(f"{record}: running the ETRecord's edge program failed "
                         f"(exit {out.returncode}):\n{tail}")
    files = {}
    for method in answer["methods"].values():
        for outputs in [*method["sequence"], *(method.get("zero_start") or ())]:
            for t in outputs:
                path = Path(t["file"])
                if path.is_absolute():  # the child writes under out_dir: never so, but say it
                    raise ModelError(f"{record}: the ETRecord child named an output outside "
                                     f"{out_dir}: {path}")
                files[str(path)] = (out_dir / path).read_bytes()
    return answer, files


def _edge_programs(record: Path) -> dict[str, Any]:
    from executorch.devtools.etrecord import parse_etrecord

    parsed = parse_etrecord(str(record))
    edge = parsed.edge_dialect_program
    if edge is None:
        raise ModelError("the ETRecord has no edge_dialect_program (save it from the "
                         "EdgeProgramManager the program was lowered from)")
    return edge if isinstance(edge, dict) else {"forward": edge}


def run(record: Path, request: dict[str, list], out_dir: Path) -> dict[str, Any]:
    """The child's work: each requested method's outputs over STATE_EXECUTES calls of one
    instance of its edge program's module (the state carried from call to call), the n-th
    call on the n-th input set requested (the last one for every later call)."""
    import torch

    from harness.protocol.tensors import load_array, numpy_to_torch, save_tensor

    programs = _edge_programs(record)
    methods: dict[str, Any] = {}
    for name, specs in request.items():
        if name not in programs:
            raise ModelError(f"the ETRecord has no edge program for method {name!r} (it has "
                             f"{', '.join(sorted(programs))})")
        program = programs[name]
        mutated = sorted(set(program.graph_signature.buffers_to_mutate.values()))
        module = program.module()
        sets = [[numpy_to_torch(load_array(TensorFile.from_json(t, out_dir))) for t in tensors]
                for tensors in specs]
        sequence = []
        runs = STATE_EXECUTES if mutated else 1
        with torch.no_grad():
            for n in range(runs):
                try:
                    outputs = module(*sets[min(n, len(sets) - 1)])
                except Exception as exc:  # the user's program: say what it raised
                    raise ModelError(f"its edge program for {name!r} does not run on the "
                                     f"suites' inputs: {type(exc).__name__}: {exc}") from exc
                outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
                sequence.append([save_tensor(t, out_dir / name / f"exec{n + 1}_out{i}.bin")
                                 .to_json(out_dir) for i, t in enumerate(outputs)])
        methods[name] = {"mutable_buffers": mutated, "sequence": sequence,
                         "zero_start": _zero_start(program, mutated, sets, out_dir, name)}
    return {"methods": methods}


def _zero_start(program: Any, mutated: list[str], sets: list[list[Any]], out_dir: Path,
                name: str) -> list[list[dict]]:
    """The executes of a fresh instance of the method's module with its mutable buffers started
    at zero: what a runtime that never sets the initial value gives (a buffer the program
    serializes no initial value for starts wherever the runtime's memory is; fresh memory is
    zero). [] for a stateless method or one that does not run so."""
    import torch

    from harness.protocol.tensors import save_tensor

    if not mutated:
        return []
    module = program.module()
    named = dict(module.named_buffers())
    out = []
    with torch.no_grad():
        for buffer in mutated:
            if buffer in named:
                named[buffer].zero_()
        for n in range(STATE_EXECUTES):
            try:
                outputs = module(*sets[min(n, len(sets) - 1)])
            except Exception:  # noqa: BLE001  (the user's program: no zero start then)
                return []
            outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
            out.append([save_tensor(t, out_dir / name / f"zero{n + 1}_out{i}.bin").to_json(out_dir)
                        for i, t in enumerate(outputs)])
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m harness.programs.etrecord RECORD REQUEST.json OUT_DIR",
              file=sys.stderr)
        return 2
    record, request, out_dir = Path(argv[0]), Path(argv[1]), Path(argv[2])
    try:
        answer = run(record, json.loads(request.read_text()), out_dir)
    except ModelError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return CHILD_ERROR_EXIT
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
