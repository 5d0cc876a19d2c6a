"""Rewrite a QNN program as one with contexts for several SoCs (FCB) would name them: each QNN
delegate gets one `qnn_compile_spec` per SoC given, in that order, the same options with the
SoC (and its HTP arch) changed. The context binaries stay the original SoC's, so the rewritten
program runs wherever the original did (the runtime takes its last compile spec). Run in a
child process (executorch imports):

    python tests/framework/fcb_rewrite.py IN.pte OUT.pte SOC [SOC ...]
"""

import copy
import sys
from pathlib import Path

from executorch.backends.qualcomm.serialization.qc_schema_serialize import (
    flatbuffer_to_option, option_to_flatbuffer)
from executorch.backends.qualcomm.utils.utils import get_soc_to_chipset_map, get_soc_to_htp_arch_map
from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
from executorch.exir.backend.compile_spec_schema import CompileSpec

QNN_COMPILE_SPEC = "qnn_compile_spec"


def rewrite(source: Path, target: Path, socs: list[str]) -> int:
    pte = deserialize_pte_binary(source.read_bytes())
    chipsets, arches = get_soc_to_chipset_map(), get_soc_to_htp_arch_map()
    rewritten = 0
    for plan in pte.program.execution_plan:
        for delegate in plan.delegates:
            specs = [s for s in delegate.compile_specs if s.key == QNN_COMPILE_SPEC]
            if not specs:
                continue
            options = flatbuffer_to_option(bytes(specs[0].value))
            others = [s for s in delegate.compile_specs if s.key != QNN_COMPILE_SPEC]
            for soc in socs:
                one = copy.deepcopy(options)
                one.soc_info.soc_model = chipsets[soc]
                one.soc_info.htp_info.htp_arch = arches[soc]
                others.append(CompileSpec(QNN_COMPILE_SPEC, option_to_flatbuffer(one)))
            delegate.compile_specs = others
            rewritten += 1
    target.write_bytes(bytes(serialize_pte_binary(pte, extract_delegate_segments=True)))
    return rewritten


if __name__ == "__main__":
    count = rewrite(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
    print(f"{count} QNN delegate(s) now name {', '.join(sys.argv[3:])}")
    sys.exit(0 if count else 1)
