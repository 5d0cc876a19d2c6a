"""update_spill_fill_size over several methods writes the program's spill-fill size into the
last method's delegates only (the lowering flow; nothing runs on a device).

    python spill_fill_size_last_method_only.py            # exit 1 while the bug is present
    python spill_fill_size_last_method_only.py --control  # one method alone: exit 0

A two-method model (models/prefill_decode_spill.py: prefill's activations exceed the HTP's
VTCM, so its context needs a spill-fill buffer; decode needs none) is lowered for SM8650 fp16
with use_multi_contexts=True by to_edge_transform_and_lower_to_qnn, then
update_spill_fill_size([prefill's program, decode's program]) returns the largest buffer any
delegate needs and must write it into every delegate's compile spec (max_sf_buf_size), because
whichever method loads first sizes the buffer the contexts share. The serialized program is read
back (flatbuffer_to_option on each QNN delegate's compile spec). With the bug prefill's
delegate keeps 0 and decode's carries the size: the function merges every program's module map
into `modules_map` but updates `module_map`, the last program's
(backends/qualcomm/utils/utils.py, update_spill_fill_size, main cff6f4dd32e6, line 313).
The control lowers prefill alone and passes its one program: its delegate carries the size.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import HERE, qnn_environment, report


def lower(methods: list[str]) -> None:
    import importlib.util

    import torch  # noqa: F401  (before executorch's QNN modules)
    from executorch.backends.qualcomm.serialization.qc_schema_serialize import (
        flatbuffer_to_option,
    )
    from executorch.backends.qualcomm.utils.utils import (
        generate_htp_compiler_spec,
        generate_qnn_executorch_compiler_spec,
        get_soc_to_chipset_map,
        to_edge_transform_and_lower_to_qnn,
        update_spill_fill_size,
    )
    from executorch.exir._serialize._program import deserialize_pte_binary

    spec = importlib.util.spec_from_file_location("model", HERE / "models" /
                                                  "prefill_decode_spill.py")
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    built = {name: value for name, value in model.build().items() if name in methods}
    specs = generate_qnn_executorch_compiler_spec(
        soc_model=get_soc_to_chipset_map()["SM8650"],
        backend_options=generate_htp_compiler_spec(use_fp16=True, use_multi_contexts=True))
    edge = to_edge_transform_and_lower_to_qnn({n: m for n, (m, _) in built.items()},
                                              {n: x for n, (_, x) in built.items()}, specs)
    size = int(update_spill_fill_size([edge.exported_program(n) for n in methods]))
    carried = {}
    buffer = edge.to_executorch().buffer
    for plan in deserialize_pte_binary(buffer).program.execution_plan:
        for delegate in plan.delegates:
            for compile_spec in delegate.compile_specs:
                if compile_spec.key == "qnn_compile_spec":
                    htp = flatbuffer_to_option(compile_spec.value).backend_options.htp_options
                    carried.setdefault(plan.name, []).append(int(htp.max_sf_buf_size))
    print("SPILL_FILL " + json.dumps({"returned": size, "carried": carried}), flush=True)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        lower(sys.argv[2:])
        return 0
    methods = ["prefill"] if "--control" in sys.argv else ["prefill", "decode"]
    with tempfile.TemporaryDirectory(prefix="lower-") as scratch:  # the lowering's scratch files
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                               *methods], capture_output=True, text=True, errors="replace",
                              env=qnn_environment(), cwd=scratch, timeout=1800)
    found = [l for l in proc.stdout.splitlines() if l.startswith("SPILL_FILL ")]
    if proc.returncode != 0 or not found:
        print(f"could not tell: the lowering ended with exit {proc.returncode}:\n"
              f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return 2
    result = json.loads(found[-1][len("SPILL_FILL "):])
    size, carried = result["returned"], result["carried"]
    if size <= 0:
        print(f"could not tell: update_spill_fill_size returned {size}: no method needs a "
              "spill-fill buffer with these QNN libraries")
        return 2
    short = {m: sizes for m, sizes in carried.items() if any(s != size for s in sizes)}
    shown = (f"update_spill_fill_size returned {size} bytes; the delegates carry "
             + ", ".join(f"{m}: {sizes}" for m, sizes in carried.items()))
    return report(bool(short), "every QNN delegate of the program carries the size "
                  "update_spill_fill_size returned", shown)


if __name__ == "__main__":
    sys.exit(main())
