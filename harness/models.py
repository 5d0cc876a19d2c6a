"""The registry of models in the repository's `models/` directory.

A model file defines NAME, BACKEND ("qnn" or "xnnpack"), PRECISIONS, TOLERANCE and `build()`,
which returns `{method: (torch module, example inputs)}`. Only `build()` imports torch, so the
registry can list models in the pytest process without paying for torch.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from harness.errors import ModelError

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    name: str
    backend: str
    precisions: tuple[str, ...]
    path: Path


def _constants(path: Path) -> dict:
    """Read the module-level literal constants without importing the file."""
    values = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return values


def registry(models_dir: Path = MODELS_DIR) -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {}
    for path in sorted(models_dir.glob("*.py")):
        consts = _constants(path)
        if "NAME" not in consts:
            continue
        missing = [k for k in ("BACKEND", "PRECISIONS") if k not in consts]
        if missing:
            raise ModelError(f"{path}: model file lacks {', '.join(missing)}")
        specs[consts["NAME"]] = ModelSpec(consts["NAME"], consts["BACKEND"],
                                          tuple(consts["PRECISIONS"]), path)
    return specs


def get_model(name: str, models_dir: Path = MODELS_DIR) -> ModelSpec:
    models = registry(models_dir)
    if name not in models:
        raise ModelError(f"unknown model {name!r}; models in {models_dir}: {', '.join(sorted(models))}")
    return models[name]
