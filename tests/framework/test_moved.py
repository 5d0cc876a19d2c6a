"""The old flat import paths of modules that moved into packages stay importable for one
release: each is the moved module itself (so attribute patches reach the code that runs), with
a DeprecationWarning naming the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import harness

pytestmark = pytest.mark.unit

OLD = sorted(p.stem for p in Path(harness.__file__).parent.glob("*.py")
             if "from harness._moved import alias" in p.read_text())

def test_every_alias_names_a_module_that_exists():
    assert len(OLD) >= 30, OLD

@pytest.mark.parametrize("old", OLD)
def test_an_old_path_is_the_moved_module_with_a_warning(old):
    code = (f"import importlib, warnings\n"
            f"with warnings.catch_warnings(record=True) as w:\n"
            f"    warnings.simplefilter('always')\n"
            f"    m = importlib.import_module('harness.{old}')\n"
            f"print(m.__name__)\n"
            f"print(w[0].message if w else '')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    new = out[0]
    assert new != f"harness.{old}" and new.startswith("harness."), out
    assert f"harness.{old} moved to {new}" in out[1], out
    assert importlib.import_module(new).__file__ != str(Path(harness.__file__).parent / f"{old}.py")

def test_an_old_module_path_still_runs_with_dash_m():
    out = subprocess.run([sys.executable, "-m", "harness.program"], capture_output=True, text=True)
    assert out.returncode != 0 and "usage: python -m harness.programs.pte" in out.stderr
