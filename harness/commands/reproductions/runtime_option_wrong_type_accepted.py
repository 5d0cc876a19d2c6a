"""QnnExecuTorchBackend::set_option accepts a runtime option of the wrong type and ignores it.

    python runtime_option_wrong_type_accepted.py            # exit 1 while the bug is present
    python runtime_option_wrong_type_accepted.py --control  # XNNPACK refuses it: exit 0

Through executorch's backend-options channel (executorch::runtime::set_option / get_option, a
small C++ program: the pybindings have no such call), `qnn_runtime_log_level` is set to 2 (an
int: accepted), then to the string "3": the backend must refuse it (Error::InvalidArgument),
as XNNPACK refuses a string for `workspace_sharing_mode` (the control). With the bug it returns
Error::Ok and keeps 2: each key's branch stores the value only
`if (auto* val = std::get_if<int>(&option.value))` and counts the option as matched either way.
"""

import sys

from common import native, report, signal_name


def main() -> int:
    control = "--control" in sys.argv
    backend, key = (("XnnpackBackend", "workspace_sharing_mode") if control
                    else ("QnnBackend", "qnn_runtime_log_level"))
    status, out, err = native("wrong-type-option", backend, key)
    if status not in (0, 1):
        print(f"could not tell: {signal_name(status)}:\n{out}\n{err[-3000:]}")
        return 2
    return report(status == 1, f"set_option({backend}, {key} = \"3\") refuses the string value "
                  "(the option takes an int)", out.strip().replace("\n", "; "))


if __name__ == "__main__":
    sys.exit(main())
