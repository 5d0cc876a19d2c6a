"""Session options for an adb device in the framework's own tests: what the plugin would build
from `pytest --device=SERIAL` with every other option at its default, plus `overrides`."""

from __future__ import annotations

from pathlib import Path

from harness.config.options import Options


def adb_options(tmp_path: Path, serial: str, **overrides) -> Options:
    base = dict(devices=[serial], simulator=False, soc=None, device_config=None,
                artifacts_dir=tmp_path / "artifacts", keep_artifacts=False, runner="auto",
                runner_timeout=None, abi_bridge="auto", keep_workspace=False,
                device_workspace=None, worker="master", worker_count=1)
    base.update(overrides)
    return Options(**base)
