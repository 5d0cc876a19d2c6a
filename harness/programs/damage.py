"""Real bad input for init-failure paths: a program whose QNN context binary is damaged.

2 KiB of the payload behind the QnnContextCustomProtocol magic (0x5678abcd) are flipped, so the
QNN library itself refuses the context during delegate init (S6, and the init-failure
reproduction of `python -m harness bug-report`).
"""

from __future__ import annotations

from harness.errors import ModelError

CONTEXT_MAGIC = (0x5678ABCD).to_bytes(4, "little")


def damaged_context_binary(pte: bytes) -> bytes:
    """`pte` with its first QNN context binary damaged; ModelError for a program without one."""
    at = pte.find(CONTEXT_MAGIC)
    if at < 0:
        raise ModelError("no QnnContextCustomProtocol magic in the program: not a QNN .pte "
                         "with a context binary")
    data = bytearray(pte)
    for offset in range(at + 64, min(at + 64 + 2048, len(data))):
        data[offset] ^= 0x5A
    return bytes(data)


QNN_SPEC_KEY = b"qnn_compile_spec"
RENAMED_SPEC_KEY = b"xnn_compile_spec"  # same length: the program's flatbuffer stays valid


def without_qnn_compile_spec(pte: bytes) -> bytes:
    """`pte` with its QNN delegates' compile spec key renamed (`qnn_compile_spec` ->
    `xnn_compile_spec`, same length), so the QNN backend finds no options of its own: a program
    it must refuse. ModelError for a program without the key."""
    if QNN_SPEC_KEY not in pte:
        raise ModelError("no qnn_compile_spec in the program: not a QNN .pte")
    return pte.replace(QNN_SPEC_KEY, RENAMED_SPEC_KEY)
