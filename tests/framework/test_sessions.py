"""Sessions never share working files: two pytest sessions at once in one checkout, with the
same --artifacts-dir and the same --hil-report, give the same verdicts as one at a time, each
its own report (the second beside the first's, said); and a damaged compile cache entry is
rebuilt, never used."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.cache import cache_root, file_sha256
from harness.programs.compile import cache_dir_name, compile_model
from harness.programs.models import get_model
from harness.qnn.sdk import discover

ROOT = Path(__file__).resolve().parents[2]


def test_two_sessions_at_once_in_one_checkout(tmp_path):
    artifacts, report = tmp_path / "artifacts", tmp_path / "report"
    cmd = [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-q", "-p",
           "no:cacheprovider", "-k", "fp16 and (s1 or s2 or s4)", f"--artifacts-dir={artifacts}",
           "--keep-artifacts", f"--hil-report={report}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out
        assert "2 passed" in out and "2 xfailed" in out and "failed" not in out.replace("xfailed", ""), out
    sessions = sorted(p for p in artifacts.iterdir() if p.is_dir() and not p.is_symlink())
    assert len(sessions) == 2, sessions
    for session in sessions:  # each kept its own traces
        traces = list(session.rglob("qnn_trace.txt"))
        assert len(traces) == 4 and all(t.stat().st_size > 0 for t in traces), traces
    assert (artifacts / "latest").resolve() in [s.resolve() for s in sessions]
    reports = sorted(tmp_path.glob("report*"))
    assert [r.name for r in reports][:1] == ["report"] and len(reports) == 2, reports
    ids = {json.loads((r / "results.json").read_text())["session_id"] for r in reports}
    assert len(ids) == 2 and all((r / "report.html").is_file() for r in reports), ids
    said = [out for out in outputs if f"--hil-report {report} belongs to a live session" in out]
    assert len(said) == 1 and str(reports[1]) in said[0], outputs


def test_a_damaged_cached_program_is_rebuilt_with_a_notice(tmp_path, monkeypatch):
    sdk = discover()
    spec = get_model("linear_relu")
    name = cache_dir_name(spec, "SM8650", "fp16", sdk.version)
    good = compile_model(spec, "SM8650", "fp16", sdk)  # in the shared cache
    copy = tmp_path / "models" / name
    shutil.copytree(good.pte.parent, copy)
    data = bytearray((copy / "model.pte").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit in the middle: still "a program"
    (copy / "model.pte").write_bytes(bytes(data))
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    notices: list[str] = []
    rebuilt = compile_model(spec, "SM8650", "fp16", sdk, notice=notices.append)
    assert len(notices) == 1 and "is damaged" in notices[0] and "differs from the recorded" in notices[0]
    assert rebuilt.pte == copy / "model.pte"
    recorded = json.loads((copy / "meta.json").read_text())["pte_sha256"]
    assert file_sha256(rebuilt.pte) == recorded
    assert compile_model(spec, "SM8650", "fp16", sdk, notice=notices.append) == rebuilt
    assert len(notices) == 1  # a whole entry is used as it is
