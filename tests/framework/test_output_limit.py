"""Runner output is bounded (harness/output_limit.py): whatever a runtime prints, the harness
keeps the head and tail of each stream within the limit, its memory stays flat, and the run's
headline says "output limit reached". The adb paths: test_adb_fork.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


from harness.drive.driver import ScenarioDriver
from harness.output_limit import LIMIT_ENV, CappedBuffer, read_capped
from harness.runner.select import RunnerChoice
from harness.scenario import Scenario

REPO = Path(__file__).resolve().parents[2]


def test_a_capped_buffer_keeps_head_and_tail_and_counts_everything():
    buffer = CappedBuffer(100)
    for i in range(1000):
        buffer.feed(f"{i:05d}\n".encode())
    text = buffer.text()
    assert buffer.total == 6000 and buffer.truncated
    assert text.startswith("00000\n") and text.endswith("00999\n")
    assert "output limit reached: 6000 bytes were written, the middle 5900 bytes" in text
    small = CappedBuffer(100)
    small.feed(b"short")
    assert small.text() == "short" and not small.truncated


def test_a_capped_file_read_keeps_head_and_tail(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a" * 1000 + b"b" * 1000)
    text, size = read_capped(path, 100)
    assert size == 2000 and text.startswith("a" * 50) and text.endswith("b" * 50)
    assert len(text) < 300


FLOOD = """
import os, sys, resource
from harness.process import run_process
out = run_process(["sh", "-c", "head -c 200000000 /dev/zero | tr '\\\\0' x; "
                   "head -c 200000000 /dev/zero | tr '\\\\0' y >&2; exit 3"], dict(os.environ), 600)
print(out.returncode, len(out.stdout), len(out.stderr), len(out.notes),
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def test_a_200_mb_flood_leaves_the_harness_memory_flat():
    """Held whole, 200 MB on each stream took the reader past 1 GB. Capped, its peak is about
    115 MB on an idle host and was 329 and 390 MB in full xdist runs (glibc's heap under load;
    the buffers themselves stay at the limit), so the bound sits between those and 1 GB."""
    proc = subprocess.run([sys.executable, "-c", FLOOD], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    code, out, err, notes, peak_mb = (int(v) for v in proc.stdout.split())
    assert code == 3 and notes == 2
    assert out < 17 * 1024 * 1024 and err < 17 * 1024 * 1024
    assert peak_mb < 600, f"peak {peak_mb} MB for a 400 MB flood"


def test_a_flooding_runner_on_the_simulator_is_cut_and_says_so(simulator_device, tmp_path,
                                                                compiled_model, monkeypatch):
    monkeypatch.setenv(LIMIT_ENV, "1")
    script = textwrap.dedent("""
        import sys
        chunk = "runtime log line that repeats forever\\n" * 1000
        for _ in range(1200):
            sys.stdout.write(chunk); sys.stderr.write(chunk)
        sys.exit(1)
    """)
    device = simulator_device(RunnerChoice("python", None, argv=(sys.executable, "-c", script)))
    scenario = Scenario("flood").load_module("A", compiled_model("linear_relu"))
    result = ScenarioDriver(device, tmp_path / "a", 300).run(scenario, allow_crash=True)
    out = result.output
    assert len(out.stdout) < 1.1 * 1024 * 1024 and len(out.stderr) < 1.1 * 1024 * 1024
    assert any("output limit reached: the runner wrote" in n and "to stdout" in n
               for n in out.notes), out.notes
    assert "output limit reached" in result.crash_headline()


def test_a_timeout_on_the_simulator_kills_what_left_the_runners_group(simulator_device, tmp_path,
                                                                      compiled_model):
    """A runner's child that left its process group (setsid) and holds its output pipes: the
    timeout still ends the run within the drain time and kills that child too."""
    import time

    from processes import wait_gone

    pid_file = tmp_path / "escaped.pid"
    script = textwrap.dedent(f"""
        import subprocess, time
        child = subprocess.Popen(["setsid", "sleep", "300"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(300)
    """)
    device = simulator_device(RunnerChoice("python", None, argv=(sys.executable, "-c", script)))
    scenario = Scenario("escape").load_module("A", compiled_model("linear_relu"))
    started = time.monotonic()
    result = ScenarioDriver(device, tmp_path / "a", 3).run(scenario, allow_crash=True)
    assert result.output.timed_out
    assert time.monotonic() - started < 60
    assert wait_gone(int(pid_file.read_text())), "the setsid child outlived the timeout"
