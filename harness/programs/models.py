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
from harness.config.paths import MODELS_DIR


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


def get_model(name: str, models_dir: Path = MODELS_DIR,
              extra_dirs: tuple[Path, ...] = ()) -> ModelSpec:
    """The model `name` from `models_dir` or any of `extra_dirs` (`--models-dir`); a name
    defined in two directories is an error naming both files."""
    found: dict[str, ModelSpec] = {}
    for directory in (models_dir, *extra_dirs):
        if not Path(directory).is_dir():
            raise ModelError(f"models directory {directory} does not exist")
        for key, spec in registry(Path(directory)).items():
            if key in found and found[key].path != spec.path:
                raise ModelError(f"model {key!r} is defined twice: {found[key].path} and {spec.path}")
            found.setdefault(key, spec)
    if name not in found:
        where = ", ".join(str(d) for d in (models_dir, *extra_dirs))
        raise ModelError(f"unknown model {name!r}; models in {where}: {', '.join(sorted(found))}. "
                         "A program file of your own runs with --pte PATH (or the hil_pte "
                         "fixture); a model file of your own with --models-dir DIR")
    return found[name]
