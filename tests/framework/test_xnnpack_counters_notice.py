"""A runtime without the XNNPACK packed-cache counters (1.5.1) is said once per session: not
under every test (as a pytest warning was: one entry per test of the warnings summary), and not
once per xdist worker (each worker says it in its own process; the controller prints it once).
A real session of the cache suite, on the simulator."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAID = "XnnpackBackend publishes no packed-cache counters"


@pytest.mark.parametrize("workers", ["0", "2"], ids=["one-process", "xdist-workers"])
def test_missing_counters_are_one_notice_per_session(tmp_path, workers):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/hil/test_xnnpack_cache.py", "-k",
         "no_cache or unwritable or fresh_cache or warm_cache", "-p", "no:cacheprovider",
         "-n", workers, "-v", f"--artifacts-dir={tmp_path / 'artifacts'}"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "4 passed" in out, out[-4000:]
    if "SKIPPED" in out:
        pytest.skip("the cache suite skipped here (no native runner)")
    if workers != "0":  # the point: more than one process met the missing counters
        assert set(re.findall(r"\[(gw\d+)\] .*PASSED", out)) == {"gw0", "gw1"}, out[-4000:]
    said = [line for line in out.splitlines() if SAID in line]
    assert len(said) == 1 and said[0].startswith("executorch "), out[-4000:]
    assert "RuntimeCountersUnavailable" not in out and "warnings summary" not in out
