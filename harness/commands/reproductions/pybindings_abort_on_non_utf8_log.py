"""Loading a file that is not a program through the pybindings aborts the process (SIGABRT)
when the runtime's log line about it is not UTF-8, instead of raising.

    python pybindings_abort_on_non_utf8_log.py            # exit 1 while the bug is present
    python pybindings_abort_on_non_utf8_log.py --control  # ASCII header bytes: must exit 0

The runtime logs "Program identifier '<bytes 4..8 of the file>' != expected 'ET12'"; the
pybindings' log hook decodes that line as UTF-8, and bytes that are not UTF-8 throw out of a
noexcept path (std::terminate). The control file differs only in those four bytes (ASCII), and
_load_program raises RuntimeError as it should for both.

The bug's own signature, not any abort: SIGABRT with std::terminate's words for a pybind11
error out of the log hook and Python's UnicodeDecodeError for the line ("terminate called after
throwing an instance of 'pybind11::error_already_set'", "UnicodeDecodeError: 'utf-8' codec
can't decode"). Another abort is "could not tell" (exit 2).
"""

import os
import sys
import tempfile

from common import child, pybindings, report, signal_name


def run(path: str) -> None:
    C = pybindings()
    try:
        C._load_program(path)
    except RuntimeError as exc:
        print(f"RuntimeError: {exc}", flush=True)
        sys.exit(0)
    print("loaded a file that is not a program", flush=True)
    sys.exit(3)


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        run(sys.argv[3])
    header = b"XXXX" if "--control" in sys.argv else b"\xff\xfe\xfd\xfc"
    with tempfile.NamedTemporaryFile(suffix=".pte", delete=False) as f:
        f.write(b"\x00\x00\x00\x00" + header + bytes(range(256)) * 16)
    try:
        status, out, err = child("load", f.name)
    finally:
        os.unlink(f.name)
    signature = (status == -6 and "terminate called after throwing an instance of "
                 "'pybind11::error_already_set'" in err
                 and "UnicodeDecodeError: 'utf-8' codec can't decode" in err)
    if status != 0 and not signature:
        print(f"could not tell: the child ended with {signal_name(status)} without the words of "
              f"the UTF-8 abort:\n{out}\n{err[-3000:]}")
        return 2
    bug = signature
    words = "\n".join(l for l in err.splitlines()
                      if "terminate called" in l or "UnicodeDecodeError" in l or "Program identifier" in l
                      or "what()" in l)
    return report(bug, "_load_program raises RuntimeError for a file that is not a program",
                  "the process died of SIGABRT (std::terminate)" if bug else out.strip(), words)


if __name__ == "__main__":
    sys.exit(main())
