"""Build the corpus: programs this project did not write, lowered for one SoC.

    python scripts/corpus/build.py OUT_DIR [--soc SM8650] [--only NAME ...]

Writes OUT_DIR/<name>.pte for every program of scripts/corpus/upstream.py and the LLM-shaped
program of scripts/corpus/llm.py, `<name>.inputs/` where a program's inputs are given, and
OUT_DIR/manifest.json: per program its kind, precision, methods and whether eager PyTorch
accepts the inputs the suites will feed it (the harness's own `input_arrays`: generated ones
must be in range, so eager must not refuse them). It also reads each program once with
`read_program(in_process=True)`, so the pytest session that runs the corpus finds every
program's facts cached instead of paying a child process per program.

Must run with the QNN libraries on LD_LIBRARY_PATH (`eval "$(python -m harness env)"`, or
scripts/corpus/run.py, which does it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]


def _eager_accepts(methods: dict, arrays: dict) -> str:
    """"" when eager PyTorch runs every method on the inputs the suites feed, else its error.

    The program's inputs are the flat list of the module's (a list of KV caches is ten
    inputs); where the program takes a quantized dtype for a float input (uint8 caches, a
    uint16 mask) the value is cast back, so what eager judges is the integer inputs' range."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    from harness.protocol.tensors import numpy_to_torch

    for name, (module, example) in methods.items():
        flat, structure = tree_flatten(example)
        fed = [numpy_to_torch(a) for a in arrays[name]]
        fed = [f if f.dtype == e.dtype or not e.dtype.is_floating_point else f.to(e.dtype)
               for f, e in zip(fed, flat)]
        try:
            with torch.no_grad():
                module(*tree_unflatten(fed, structure))
        except Exception as exc:  # noqa: BLE001 (eager's own refusal is the answer)
            return f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return ""


def _given_inputs(pte: Path, methods: dict) -> None:
    import numpy as np

    from harness.protocol.tensors import torch_to_numpy
    from harness.programs.user import inputs_dir

    for name, (_, inputs) in methods.items():
        directory = inputs_dir(pte) / name
        directory.mkdir(parents=True, exist_ok=True)
        for i, tensor in enumerate(inputs):
            np.save(directory / f"{i}.npy", torch_to_numpy(tensor))


def build_one(name: str, precision: str, kind: str, methods: dict, lower, out: Path,
              soc: str, given: bool) -> dict:
    from harness.programs.pte_reader import read_program
    from harness.programs.user import input_arrays

    started = time.monotonic()
    pte = out / f"{name}.pte"
    pte.write_bytes(lower(methods, soc, precision))
    if given:
        _given_inputs(pte, methods)
    info = read_program(pte, in_process=True)
    eager = _eager_accepts(methods, input_arrays(info))
    return {"kind": kind, "precision": precision, "methods": list(info.methods),
            "delegated": sorted({d.method for d in info.qnn_delegates}),
            # Methods whose inputs or outputs the app owns (not memory-planned).
            "unplanned_io": sorted(m.name for m in info.methods.values()
                                   if m.unplanned_inputs or m.unplanned_outputs),
            # Methods with a non-tensor output (an int, a double, a bool, a string: the
            # metadata methods of an LLM export), each with its outputs' kinds.
            # (`planned` is None exactly for a program's non-tensor values.)
            "value_outputs": {m.name: [o.dtype for o in m.outputs]
                              for m in info.methods.values()
                              if any(o.planned is None for o in m.outputs)},
            "eager_refuses_inputs": eager, "build_s": round(time.monotonic() - started, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--soc", default="SM8650")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    import llm
    import upstream

    programs = {name: (precision, kind, methods, upstream.lower, name in upstream.GIVEN_INPUTS)
                for name, (precision, kind, methods) in upstream.catalogue().items()}
    for name, (precision, kind, methods) in llm.catalogue().items():
        programs[name] = (precision, kind, methods, llm.lowering(name), False)
    manifest: dict[str, dict] = {}
    failed = []
    for name, (precision, kind, methods, lower, given) in programs.items():
        if args.only and name not in args.only:
            continue
        try:
            manifest[name] = build_one(name, precision, kind, methods, lower, args.out,
                                       args.soc, given)
        except Exception:  # noqa: BLE001 (one program that does not lower is reported, not fatal)
            failed.append(name)
            print(f"{name}: does not lower for {args.soc} in {precision}:\n"
                  f"{traceback.format_exc()[-3000:]}", file=sys.stderr, flush=True)
            continue
        print(f"built {name} ({precision}, {manifest[name]['build_s']} s)", flush=True)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if failed:
        print(f"programs that did not lower: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
