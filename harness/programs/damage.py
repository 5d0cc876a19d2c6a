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
