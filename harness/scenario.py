"""Scenarios: ordered lifecycle steps over named modules, and their JSON form for runners.

A test builds a scenario with the fluent methods (`load_module`, `load_method`, `execute`,
`unload_method`, `destroy_module`, `snapshot`, `set_option`, `get_option`); the device stages
it (`to_json` with paths as the runner will see them). The JSON form is the contract in
docs/runner-protocol.md.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Callable

from harness.compile import CompiledModel
from harness.errors import HarnessError

OPS = ("load_module", "load_method", "execute", "unload_method", "destroy_module", "snapshot",
       "set_option", "get_option")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ScenarioError(HarnessError):
    """A scenario that cannot be run as written."""


@dataclasses.dataclass(frozen=True)
class Step:
    op: str
    module: str | None = None
    method: str | None = None
    args: dict[str, Any] = dataclasses.field(default_factory=dict)

    def describe(self) -> str:
        target = ".".join(p for p in (self.module, self.method) if p)
        return f"{self.op}({target})" if target else self.op


@dataclasses.dataclass
class Scenario:
    name: str
    steps: list[Step] = dataclasses.field(default_factory=list)
    models: dict[str, CompiledModel] = dataclasses.field(default_factory=dict)  # module -> model
    watch_mappings: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ScenarioError(f"scenario name {self.name!r} must match {_NAME.pattern}")

    # Building ------------------------------------------------------------------------------
    def _add(self, step: Step) -> "Scenario":
        self.steps.append(step)
        return self

    def load_module(self, module: str, model: CompiledModel,
                    backend_options: dict[str, dict[str, Any]] | None = None) -> "Scenario":
        if not _NAME.match(module):
            raise ScenarioError(f"module name {module!r} must match {_NAME.pattern}")
        self.models[module] = model
        args = {"backend_options": backend_options} if backend_options else {}
        return self._add(Step("load_module", module, None, args))

    def load_method(self, module: str, method: str) -> "Scenario":
        return self._add(Step("load_method", module, self._method(module, method)))

    def execute(self, module: str, method: str) -> "Scenario":
        return self._add(Step("execute", module, self._method(module, method)))

    def unload_method(self, module: str, method: str) -> "Scenario":
        return self._add(Step("unload_method", module, self._method(module, method)))

    def destroy_module(self, module: str) -> "Scenario":
        self._model(module)
        return self._add(Step("destroy_module", module))

    def snapshot(self) -> "Scenario":
        return self._add(Step("snapshot"))

    def set_option(self, backend: str, key: str, value: bool | int | str) -> "Scenario":
        return self._add(Step("set_option", args={"backend": backend, "key": key, "value": value}))

    def get_option(self, backend: str, key: str, type: str = "int") -> "Scenario":
        return self._add(Step("get_option", args={"backend": backend, "key": key, "type": type}))

    def _model(self, module: str) -> CompiledModel:
        if module not in self.models:
            raise ScenarioError(f"scenario {self.name}: module {module!r} is used before "
                                "load_module gives it a model")
        return self.models[module]

    def _method(self, module: str, method: str) -> str:
        model = self._model(module)
        if method not in model.methods:
            raise ScenarioError(f"scenario {self.name}: model {model.name} has no method "
                                f"{method!r} (it has {', '.join(model.methods)})")
        return method

    # Serializing ---------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """Every host file the runner will read (programs and reference tensors)."""
        seen: dict[Path, None] = {}
        for model in self.models.values():
            for path in model.files():
                seen.setdefault(path, None)
        return list(seen)

    def to_json(self, place: Callable[[Path], str] = str) -> dict:
        """The runner's scenario document; `place` maps a host file to the runner's path."""
        steps = []
        for step in self.steps:
            doc: dict[str, Any] = {"op": step.op}
            if step.module:
                doc["module"] = step.module
            if step.method:
                doc["method"] = step.method
            doc.update(step.args)
            if step.op == "load_module":
                doc["pte"] = place(self.models[step.module].pte)
            if step.op == "execute":
                model = self.models[step.module]
                ref = model.methods[step.method]
                doc["inputs"] = [_tensor(t, place) for t in ref.inputs]
                doc["expected"] = [_tensor(t, place) for t in ref.expected]
                doc["atol"], doc["rtol"] = model.atol, model.rtol
            steps.append(doc)
        return {"version": 1, "name": self.name, "watch_mappings": list(self.watch_mappings),
                "steps": steps}

    def write(self, path: Path, place: Callable[[Path], str] = str) -> Path:
        path.write_text(json.dumps(self.to_json(place), indent=1))
        return path


def _tensor(tensor, place: Callable[[Path], str]) -> dict:
    return {"dtype": tensor.dtype, "shape": list(tensor.shape), "file": place(tensor.file)}


def parse_scenario(doc: dict) -> list[Step]:
    """Validate a scenario document (as runners receive it) and return its steps."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ScenarioError("a scenario is an object with a 'steps' list")
    steps = []
    for i, raw in enumerate(doc["steps"]):
        if not isinstance(raw, dict) or raw.get("op") not in OPS:
            raise ScenarioError(f"step {i}: 'op' must be one of {', '.join(OPS)}, got "
                                f"{raw.get('op') if isinstance(raw, dict) else raw!r}")
        needs = {"load_module": ("module", "pte"), "load_method": ("module", "method"),
                 "execute": ("module", "method"), "unload_method": ("module", "method"),
                 "destroy_module": ("module",), "set_option": ("backend", "key", "value"),
                 "get_option": ("backend", "key")}.get(raw["op"], ())
        missing = [k for k in needs if k not in raw]
        if missing:
            raise ScenarioError(f"step {i} ({raw['op']}): missing {', '.join(missing)}")
        args = {k: v for k, v in raw.items() if k not in ("op", "module", "method")}
        steps.append(Step(raw["op"], raw.get("module"), raw.get("method"), args))
    return steps
