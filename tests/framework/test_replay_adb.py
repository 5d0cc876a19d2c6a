"""Replay on an adb device: S1 run on a loopback SM8650 phone through the real adb server ends
its failure message with a replay command that names the phone, and that command, run as
printed, fails again at the same step with the runtime's words (the device's own run)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runtime import executorch_version

from phones import phone  # noqa: F401 -- the module's loopback phone fixture

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(shutil.which("adb") is None,
                       reason="the adb client/server (Debian package adb) is not installed"),
    pytest.mark.skipif(executorch_version() != "1.5.1",
                       reason="S1 fails (the delegate-cache bug) on executorch 1.5.1"),
]


def test_replay_on_the_phone_the_failure_message_names(phone, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    session = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-q", "-p",
         "no:cacheprovider", "-k", "s1 and fp16-A", "--ignore-known-issues",
         f"--device={phone.serial}", f"--artifacts-dir={tmp_path / 'artifacts'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert session.returncode == 1, session.stdout + session.stderr
    commands = re.findall(r"^replay: (python -m harness replay .*)$", session.stdout, re.M)
    assert len(commands) == 1 and f"--device {phone.serial}" in commands[0], session.stdout
    replay = subprocess.run([sys.executable, *shlex.split(commands[0])[1:]], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert f"target: adb {phone.serial} soc=SM8650" in replay.stdout
    assert "DelegateHandle has been deleted" in replay.stdout
    assert "first failing step: 5 execute(B.forward), the same step as recorded" in replay.stdout
