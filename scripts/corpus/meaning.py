"""What eager PyTorch says of the corpus: each program's solo run (the reference every test of
a `--pte` session holds it to) against the eager module it was lowered from, on the inputs
the suites feed.

    python scripts/corpus/meaning.py ARTIFACTS_DIR [--corpus DIR]

ARTIFACTS_DIR is a `--pte` session's artifacts directory (`.hil-artifacts/<time>-<pid>`, as
`python scripts/corpus/run.py --out DIR` leaves it): its `programs/<worker>/<name>-<sha>/
reference/<method>/out<j>.bin` are the solo runs. The corpus programs carry no ETRecord, so
their tests are judged against the solo run; this says whether that reference is what the
program means. Per program: the largest difference from eager over every tensor output, and
whether it is within the tolerance of the program's precision (harness.programs.user.
MEANING_TOLERANCE: fp16 0.02, quantized 0.1, against eager in float32). The LLM-shaped programs
(random weights, 16a8w) are left out: their float eager model is no meaning for the quantized
logits. Must run with the QNN libraries on LD_LIBRARY_PATH (`eval "$(python -m harness env)"`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]


def compare(name: str, methods: dict, pte: Path, artifacts: Path, atol: float,
            rtol: float) -> tuple[float | None, bool, str]:
    """(largest abs difference from eager over the tensor outputs, whether every element is
    within atol + rtol * |eager|, words) for one program."""
    import numpy as np
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    from harness.programs.pte_reader import read_program
    from harness.programs.user import input_arrays
    from harness.protocol.tensors import DTYPES, numpy_dtype, numpy_to_torch, torch_to_numpy

    info = read_program(pte)
    found = sorted(artifacts.glob(f"programs/*/{name}-{info.sha256[:12]}/reference"))
    if not found:
        return None, False, "no solo run in the artifacts"
    arrays = input_arrays(info)
    worst, close = 0.0, True
    for method, (module, example) in methods.items():
        flat, structure = tree_flatten(example)
        fed = [numpy_to_torch(a) for a in arrays[method]]
        fed = [f if f.dtype == e.dtype or not e.dtype.is_floating_point else f.to(e.dtype)
               for f, e in zip(fed, flat)]
        with torch.no_grad():
            outputs, _ = tree_flatten(module(*tree_unflatten(fed, structure)))
        specs = info.methods[method].outputs
        for j, (want, spec) in enumerate(zip(outputs, specs)):
            path = found[0] / method / f"out{j}.bin"
            if spec.dtype not in DTYPES or not path.is_file():
                continue
            got = np.fromfile(path, dtype=numpy_dtype(spec.dtype)).astype(np.float64)
            ref = torch_to_numpy(want.detach()).astype(np.float64).reshape(-1)
            if got.shape != ref.shape:
                return None, False, f"{method} output {j}: {got.shape} elements, eager {ref.shape}"
            finite = np.isfinite(ref) & np.isfinite(got)
            same_inf = (~np.isfinite(ref)) & (got == ref)
            if not (finite | same_inf).all():
                return float("inf"), False, f"{method} output {j}: non-finite where eager differs"
            worst = max(worst, float(np.abs(got[finite] - ref[finite]).max(initial=0.0)))
            close = close and bool(np.allclose(got[finite], ref[finite], atol=atol, rtol=rtol))
    return worst, close, ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path)
    parser.add_argument("--corpus", type=Path, default=None)
    args = parser.parse_args(argv)
    from harness.programs.user import MEANING_TOLERANCE

    import upstream
    from run import corpus_dir

    corpus = args.corpus or corpus_dir("SM8650")
    manifest = json.loads((corpus / "manifest.json").read_text())
    rows = []
    for name, (precision, _, methods) in upstream.catalogue().items():
        if name not in manifest:
            continue
        atol, rtol = MEANING_TOLERANCE["fp16" if precision == "fp16" else "quantized"]
        diff, close, words = compare(name, methods, corpus / f"{name}.pte", args.artifacts,
                                     atol, rtol)
        verdict = "?" if diff is None else "agrees" if close else "differs"
        shown = "-" if diff is None else f"{diff:.4g}"
        rows.append((name, precision, shown, f"{atol:g}", verdict, words))
    width = max(len(r[0]) for r in rows)
    print(f"{'program':<{width}}  precision  max|runtime-eager|  atol=rtol  eager says")
    for name, precision, shown, tol, verdict, words in rows:
        print(f"{name:<{width}}  {precision:<9}  {shown:<17}  {tol:<9}  {verdict}"
              + (f" ({words})" if words else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
