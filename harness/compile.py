"""Compiles registry models to `.pte` files, cached on disk.

The cache key covers everything that changes the output: the model's source, the SoC, the
precision, the ExecuTorch version, the QNN library version and the compile worker's own source;
a second run with the same key compiles nothing. Compilation runs in a child process with the
QNN environment (see harness.qnn.sdk).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from harness.cache import cache_root, digest, file_lock
from harness.errors import ModelError
from harness.models import ModelSpec
from harness.qnn.sdk import QnnSdk, executorch_version
from harness.tensors import TensorFile

WORKER = Path(__file__).with_name("compile_worker.py")
COMPILE_TIMEOUT_S = 900


@dataclasses.dataclass(frozen=True)
class MethodReference:
    inputs: tuple[TensorFile, ...]
    expected: tuple[TensorFile, ...]


@dataclasses.dataclass(frozen=True)
class CompiledModel:
    """A `.pte` file and the CPU reference of each of its methods."""

    name: str
    backend: str
    soc: str
    precision: str
    pte: Path
    methods: dict[str, MethodReference]
    atol: float
    rtol: float

    @classmethod
    def load(cls, directory: Path) -> "CompiledModel":
        meta = json.loads((directory / "meta.json").read_text())
        methods = {
            name: MethodReference(
                tuple(TensorFile.from_json(t, directory) for t in ref["inputs"]),
                tuple(TensorFile.from_json(t, directory) for t in ref["expected"]))
            for name, ref in meta["methods"].items()
        }
        return cls(meta["name"], meta["backend"], meta["soc"], meta["precision"],
                   directory / "model.pte", methods, meta["atol"], meta["rtol"])

    def files(self) -> list[Path]:
        """Every file a runner needs: the program and its reference tensors."""
        out = [self.pte]
        for ref in self.methods.values():
            out += [t.file for t in (*ref.inputs, *ref.expected)]
        return out


def cache_key(spec: ModelSpec, soc: str, precision: str, sdk_version: str) -> str:
    return digest([spec.path.read_bytes(), soc, precision, executorch_version(), sdk_version,
                   WORKER.read_bytes()])


def compile_model(spec: ModelSpec, soc: str, precision: str, sdk: QnnSdk,
                  log_dir: Path | None = None) -> CompiledModel:
    """Return the compiled model, from the cache when this exact build was made before."""
    if precision not in spec.precisions:
        raise ModelError(f"model {spec.name} supports precisions {', '.join(spec.precisions)}, "
                         f"not {precision!r}")
    key = cache_key(spec, soc, precision, sdk.version)
    out_dir = cache_root() / "models" / f"{spec.name}-{soc}-{precision}-{key}"
    with file_lock(out_dir.with_suffix(".lock")):
        if (out_dir / "meta.json").exists() and (out_dir / "model.pte").exists():
            return CompiledModel.load(out_dir)
        tmp_dir = out_dir.with_name(out_dir.name + ".tmp")
        env = {**os.environ, **sdk.environment()}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        cmd = [sys.executable, "-m", "harness.compile_worker", str(spec.path), soc, precision, str(tmp_dir)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise ModelError(f"compiling {spec.name} for {soc} {precision} timed out after "
                             f"{COMPILE_TIMEOUT_S} s") from exc
        log = proc.stdout + proc.stderr
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / f"compile-{spec.name}-{soc}-{precision}.log").write_text(log)
        if proc.returncode != 0 or not (tmp_dir / "meta.json").exists():
            tail = "\n".join(log.strip().splitlines()[-25:])
            raise ModelError(f"compiling {spec.name} for {soc} {precision} failed "
                             f"(exit {proc.returncode}):\n{tail}")
        if out_dir.exists():
            import shutil
            shutil.rmtree(out_dir)
        tmp_dir.rename(out_dir)
    return CompiledModel.load(out_dir)
