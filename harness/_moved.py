"""Old import paths of modules that moved into packages (harness 0.1 had 37 flat modules):
each old name is the moved module itself, so imports, attribute patches and `isinstance` keep
working for one release, with a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import runpy
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make the module being imported as `old` the module `new` (run as `python -m old`: run
    `new` as the main module)."""
    if old == "__main__":
        runpy.run_module(new, run_name="__main__", alter_sys=True)
        return
    warnings.warn(f"{old} moved to {new}; import it from there (the old path goes in the next "
                  "release)", DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
