"""Scenarios: ordered lifecycle steps over named modules, and their JSON form for runners.

A test builds a scenario with the fluent methods (`load_module`, `load_method`, `execute`,
`unload_method`, `destroy_module`, `snapshot`, `set_option`, `get_option`, `parallel`); the
device stages it (`to_json` with paths as the runner will see them). The JSON form is the
runner protocol's scenario file: harness/protocol/scenario_file.py defines it and
harness/protocol/scenario_check.py validates it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.errors import ModelError
from harness.programs.compile import CompiledModel
from harness.protocol.tensors import TensorFile
from harness.protocol.nemesis import NemesisError, check_rules
from harness.protocol.scenario_file import (LOAD_MODES, DecodeSpec, MAX_PARALLEL, PARALLEL_OPS,
                                            SCENARIO_VERSION, ScenarioError, ScenarioStep)
from harness.protocol.scenario_check import check_distinct_modules, validate_scenario
from harness.runner.launch import Launch

__all__ = ["Scenario", "Step", "parse_scenario"]

# Names the builder gives scenarios and modules (they end up in file and directory names); the
# scenario file itself takes any non-empty string.
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclasses.dataclass(frozen=True)
class Step:
    """One scenario step. A `parallel` step has no module or method of its own: its sub-steps
    (each a plain Step) are in `args["steps"]`, a tuple, and `substeps` returns them."""

    op: str
    module: str | None = None
    method: str | None = None
    args: dict[str, Any] = dataclasses.field(default_factory=dict)
    # An execute's input set: 0 the method's reference inputs, n its n-th variant
    # (MethodReference.variants); the runner sees only the files it names.
    variant: int = 0

    @property
    def substeps(self) -> tuple[Step, ...]:
        """The sub-steps of a `parallel` step; () for every other op."""
        return tuple(self.args.get("steps", ())) if self.op == "parallel" else ()

    @property
    def flat(self) -> tuple[Step, ...]:
        """The steps this step applies: its sub-steps for `parallel`, else itself."""
        return self.substeps if self.op == "parallel" else (self,)

    @property
    def modules(self) -> tuple[str, ...]:
        """Every module this step touches (several for `parallel`)."""
        return tuple(s.module for s in self.flat if s.module)

    def describe(self) -> str:
        if self.op == "parallel":
            return f"parallel({' | '.join(s.describe() for s in self.substeps)})"
        target = ".".join(p for p in (self.module, self.method) if p)
        return f"{self.op}({target})" if target else self.op


@dataclasses.dataclass
class Scenario:
    name: str
    steps: list[Step] = dataclasses.field(default_factory=list)
    models: dict[str, CompiledModel] = dataclasses.field(default_factory=dict)  # module -> model
    watch_mappings: list[str] = dataclasses.field(default_factory=list)
    # Indices of steps whose error is not a failure of the run: a step that must fail (loading
    # a damaged program; the test asserts that it did) or a probe a runtime may reject.
    allowed_errors: set[int] = dataclasses.field(default_factory=set)
    # Indices of execute steps the scenario makes fail (an injected QNN failure): a failed
    # execute must leave its method's state as it was, so it does not advance a stateful
    # method's count of executes (`ordinals`).
    failed_executes: set[int] = dataclasses.field(default_factory=set)
    # Names of steps a test reads back (`ScenarioResult.step("both_loaded")`), so a test says
    # which step it means instead of counting: label -> step index. Host-side only: runners
    # never see labels.
    labels: dict[str, int] = dataclasses.field(default_factory=dict)
    # Run in a new runner process that has loaded nothing, never a fork of a server holding
    # the QNN libraries: a scenario about the runtime really unloading them needs that.
    fresh_process: bool = False
    # Variables added to the runner process's environment (a heap fill, MALLOC_PERTURB_, for
    # a reference read twice): a scenario with any runs in a new process, as fresh_process
    # (the allocator reads them at start). Host-side only: the scenario file never says them.
    run_env: dict[str, str] = dataclasses.field(default_factory=dict)
    # The outputs are judged by the caller against another run of the scenario (a fault
    # sweep's run with nothing injected), not by harness.results.failures: neither between
    # the run's own executes nor a method's missing reference. Host-side only.
    outputs_judged_elsewhere: bool = False
    # Rules for the QNN interposer (harness.protocol.nemesis): threads held at named points and
    # QNN calls made to fail, so the scenario states an interleaving or a failure as data.
    qnn_nemesis: list[str] = dataclasses.field(default_factory=list)
    # Wrappers the runner process starts under, outermost first (harness.runner.launch: libfiu's
    # `fiu-run` making POSIX calls fail, util-linux `setpriv` dropping capabilities): the
    # cause of a branch, recorded with the run (replay.json `launch`) so replay and the exports
    # start the runner under it again. Runs in a new process. Host-side only: the scenario
    # file never says them.
    launch: list[Launch] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ScenarioError(f"scenario name {self.name!r} must match {_NAME.pattern}")

    @property
    def own_process(self) -> bool:
        """Whether the scenario needs a runner process of its own (never a fork of a server):
        a fresh process, an environment of its own, or a wrapper it starts under."""
        return self.fresh_process or bool(self.run_env) or bool(self.launch)

    # Building ------------------------------------------------------------------------------
    def _add(self, step: Step) -> Scenario:
        self.steps.append(step)
        return self

    def load_module(self, module: str, model: CompiledModel,
                    backend_options: dict[str, dict[str, Any]] | None = None,
                    load_mode: str | None = None) -> Scenario:
        """`load_mode`: how the runner reads the program (protocol.LOAD_MODES, Module's
        LoadMode); None leaves the runner's default (MmapUseMlockIgnoreErrors)."""
        if not _NAME.match(module):
            raise ScenarioError(f"module name {module!r} must match {_NAME.pattern}")
        if load_mode is not None and load_mode not in LOAD_MODES:
            raise ScenarioError(f"load_mode {load_mode!r} must be one of {', '.join(LOAD_MODES)}")
        self.models[module] = model
        args: dict[str, Any] = {"backend_options": backend_options} if backend_options else {}
        if load_mode is not None:
            args["load_mode"] = load_mode
        return self._add(Step("load_module", module, None, args))

    def load_method(self, module: str, method: str) -> Scenario:
        return self._add(Step("load_method", module, self._method(module, method)))

    def execute(self, module: str, method: str, emit_outputs: bool = False,
                variant: int = 0, feed: tuple[tuple[int, int], ...] = (),
                shared_inputs: bool = False, decode: DecodeSpec | None = None) -> Scenario:
        """`emit_outputs`: the runner reports the outputs' bytes too (a reference run).
        `variant`: execute on the method's n-th other input set (MethodReference.variants),
        judged against that set's own expected outputs. `feed`: (input, output) pairs: that
        input takes that output of the module's previous execute (a decode loop).
        `decode`: the runner builds the token and KV-cache inputs from the module's previous
        execute, as an LLM app's KV manager does (the protocol's `decode`).
        `shared_inputs`: the inputs go to QNN shared memory (QnnExecuTorchAllocCustomMem), as
        an app passes them to a program compiled with shared_buffer."""
        model = self.models.get(module)
        emit_outputs = emit_outputs or (model is not None and model.emit_outputs)
        args: dict[str, Any] = {"emit_outputs": True} if emit_outputs else {}
        if shared_inputs:
            args["shared_inputs"] = True
        if feed:
            args["feed"] = [[int(i), int(o)] for i, o in feed]
        if decode is not None:
            args["decode"] = decode.to_json()
        method = self._method(module, method)
        self._check_variant(module, method, variant)
        return self._add(Step("execute", module, method, args, variant))

    def _check_variant(self, module: str, method: str, variant: int) -> None:
        ref = self.models[module].methods[method]
        if not isinstance(variant, int) or not 0 <= variant <= len(ref.variants):
            have = f"variants 1..{len(ref.variants)}" if ref.variants else "no variants"
            raise ScenarioError(f"scenario {self.name}: {self.models[module].name}.{method} has "
                                f"{have} of its inputs, not variant {variant!r}")

    def unload_method(self, module: str, method: str) -> Scenario:
        return self._add(Step("unload_method", module, self._method(module, method)))

    def destroy_module(self, module: str) -> Scenario:
        self._model(module)
        return self._add(Step("destroy_module", module))

    def snapshot(self) -> Scenario:
        return self._add(Step("snapshot"))

    def allow_error(self) -> Scenario:
        """Mark the last step as one whose error is not a failure of the run (a test that needs
        it to fail asserts that itself)."""
        if not self.steps:
            raise ScenarioError(f"scenario {self.name}: allow_error() needs a step before it")
        self.allowed_errors.add(len(self.steps) - 1)
        return self

    def nemesis(self, *rules: str) -> Scenario:
        """Add QNN nemesis rules (harness.protocol.nemesis: `hold(...)`, `fail_at(...)` or
        their text); checked now, so a scenario never carries one the interposer cannot read."""
        try:
            self.qnn_nemesis += list(check_rules(list(rules)))
            check_rules(self.qnn_nemesis)
        except NemesisError as exc:
            raise ScenarioError(f"scenario {self.name}: {exc}") from None
        return self

    def label(self, name: str) -> Scenario:
        """Name the last step, for `ScenarioResult.step(name)`."""
        if not self.steps:
            raise ScenarioError(f"scenario {self.name}: label({name!r}) needs a step before it")
        if name in self.labels:
            raise ScenarioError(f"scenario {self.name}: label {name!r} is already step "
                                f"{self.labels[name]}")
        self.labels[name] = len(self.steps) - 1
        return self

    def set_option(self, backend: str, key: str, value: bool | int | str) -> Scenario:
        return self._add(Step("set_option", args={"backend": backend, "key": key, "value": value}))

    def get_option(self, backend: str, key: str, type: str = "int") -> Scenario:
        return self._add(Step("get_option", args={"backend": backend, "key": key, "type": type}))

    def parallel(self, *substeps: tuple[Any, ...]) -> Scenario:
        """Sub-steps run at once, one thread each, released together (runner-protocol.md).

        Each sub-step is `(op, module, method_or_None)`, op one of PARALLEL_OPS, every one on a
        different module, e.g. `("load_method", "A", "forward")`, `("destroy_module", "B")`. For
        `load_module` the third element is the module's CompiledModel (or None when an earlier
        `load_module` of that name gave it one), and an optional fourth its backend_options;
        for `execute` an optional fourth is its input variant (`execute(..., variant=n)`).
        """
        if not substeps:
            raise ScenarioError(f"scenario {self.name}: parallel needs at least one sub-step")
        if len(substeps) > MAX_PARALLEL:
            raise ScenarioError(f"scenario {self.name}: parallel takes at most {MAX_PARALLEL} "
                                "sub-steps")
        steps: list[Step] = []
        new_models: dict[str, CompiledModel] = {}  # kept only if every sub-step is valid
        for sub in substeps:
            if not isinstance(sub, (tuple, list)) or not 2 <= len(sub) <= 4:
                raise ScenarioError(f"scenario {self.name}: a parallel sub-step is a tuple "
                                    f"(op, module, method_or_None), got {sub!r}")
            op, module, third, *rest = (*sub, None) if len(sub) == 2 else sub
            if op not in PARALLEL_OPS:
                raise ScenarioError(f"scenario {self.name}: parallel sub-step op must be one of "
                                    f"{', '.join(PARALLEL_OPS)}, got {op!r}")
            if not isinstance(module, str) or not _NAME.match(module):
                raise ScenarioError(f"module name {module!r} must match {_NAME.pattern}")
            if rest and op not in ("load_module", "execute"):
                raise ScenarioError(f"scenario {self.name}: parallel {op} takes "
                                    "(op, module, method_or_None)")
            if op == "load_module":
                if third is not None:
                    if not isinstance(third, CompiledModel):
                        raise ScenarioError(f"scenario {self.name}: parallel load_module of "
                                            f"{module} takes a CompiledModel, got {third!r}")
                    new_models[module] = third
                elif module not in self.models:
                    self._model(module)  # raises: no model for this module yet
                options = rest[0] if rest else None
                steps.append(Step("load_module", module, None,
                                  {"backend_options": options} if options else {}))
            elif op == "destroy_module":
                if third is not None:
                    raise ScenarioError(f"scenario {self.name}: destroy_module takes no method")
                self._model(module)
                steps.append(Step(op, module))
            else:
                if third is None:
                    raise ScenarioError(f"scenario {self.name}: parallel {op} of {module} "
                                        "needs a method")
                method = self._method(module, third)
                variant = rest[0] if rest and op == "execute" else 0
                if variant:
                    self._check_variant(module, method, variant)
                steps.append(Step(op, module, method, {}, variant))
        _check_distinct_modules(steps, f"scenario {self.name}: parallel")
        self.models.update(new_models)
        return self._add(Step("parallel", None, None, {"steps": tuple(steps)}))

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

    def ordinals(self) -> list[tuple[int | None, ...]]:
        """Per step, per flat sub-step, which execute of its method since the module loaded
        it (1-based) an execute is; None for any other op. A stateful method's reference
        depends on it (`MethodReference.expected_at`)."""
        return execute_ordinals(self.steps, self.failed_executes)

    def expected_for(self, step: Step, ordinal: int | None) -> tuple[TensorFile, ...]:
        """What the runner compares `step` (an execute) with: the method's reference for its
        `ordinal`-th execute."""
        assert step.module is not None and step.method is not None
        ref = self.models[step.module].methods[step.method]
        if step.variant:
            return ref.variants[step.variant - 1][1]
        try:
            return ref.expected_at(ordinal or 1)
        except ModelError as exc:
            raise ScenarioError(f"scenario {self.name}: {step.describe()}: {exc}") from None

    def to_json(self, place: Callable[[Path], str] = str) -> dict[str, Any]:
        """The runner's scenario document; `place` maps a host file to the runner's path.
        Validated against the protocol (ScenarioError), so a runner never refuses what the
        builder wrote."""
        steps = [self._step_json(step, place, nth)
                 for step, nth in zip(self.steps, self.ordinals())]
        doc = {"version": SCENARIO_VERSION, "name": self.name,
               "watch_mappings": list(self.watch_mappings), "steps": steps}
        if self.qnn_nemesis:
            doc["qnn_nemesis"] = list(self.qnn_nemesis)
        validate_scenario(doc)
        return doc

    def _step_json(self, step: Step, place: Callable[[Path], str],
                   ordinals: tuple[int | None, ...] = (None,)) -> dict[str, Any]:
        doc: dict[str, Any] = {"op": step.op}
        if step.module:
            doc["module"] = step.module
        if step.method:
            doc["method"] = step.method
        if step.op == "parallel":
            doc["steps"] = [self._step_json(sub, place, (nth,))
                            for sub, nth in zip(step.substeps, ordinals)]
            doc.update({k: v for k, v in step.args.items() if k != "steps"})
            return doc
        doc.update(step.args)
        if step.op == "load_module":
            assert step.module is not None  # the builder gives every load a module
            doc["pte"] = place(self.models[step.module].pte)
        if step.op == "execute":
            assert step.module is not None and step.method is not None
            model = self.models[step.module]
            ref = model.methods[step.method]
            inputs = (ref.variants[step.variant - 1][0] if step.variant
                      else ref.inputs_at(ordinals[0]))
            doc["inputs"] = [_tensor(t, place) for t in inputs]
            doc["expected"] = [_tensor(t, place) for t in self.expected_for(step, ordinals[0])]
            doc["atol"], doc["rtol"] = model.atol, model.rtol
        return doc

    def write(self, path: Path, place: Callable[[Path], str] = str) -> Path:
        path.write_text(json.dumps(self.to_json(place)))  # one line: the C encoder is fast
        return path


def execute_ordinals(steps: list[Step],
                     failed: set[int] | frozenset[int] = frozenset()) -> list[tuple[int | None, ...]]:
    """Per step, per flat sub-step: the ordinal of an execute among its method's executes
    since the module loaded it, else None. A Module's method state starts at its load: a new
    `load_module`, a `destroy_module` or an `unload_method` starts the count again (each
    ExecuTorch Method holds its own mutable buffers, initialised when it is loaded). An execute
    at a step of `failed` (made to fail) does not count: it must not change the state."""
    counts: dict[tuple[str, str], int] = {}
    out: list[tuple[int | None, ...]] = []
    for index, step in enumerate(steps):
        if index in failed and step.op == "execute":
            out.append((None,))
            continue
        row: list[int | None] = []
        for sub in step.flat:
            module, method = sub.module or "", sub.method or ""
            nth: int | None = None
            if sub.op in ("load_module", "destroy_module"):
                for key in [k for k in counts if k[0] == module]:
                    del counts[key]
            elif sub.op == "unload_method":
                counts.pop((module, method), None)
            elif sub.op == "execute":
                nth = counts[(module, method)] = counts.get((module, method), 0) + 1
            row.append(nth)
        out.append(tuple(row))
    return out


def _tensor(tensor: TensorFile, place: Callable[[Path], str]) -> dict[str, Any]:
    return {"dtype": tensor.dtype, "shape": list(tensor.shape), "file": place(tensor.file)}


def _check_distinct_modules(steps: list[Step], where: str) -> None:
    check_distinct_modules([s.module for s in steps], where)


def _step(raw: dict[str, Any], parsed: ScenarioStep) -> Step:
    """A builder Step from a validated step: its module and method as the protocol reads them,
    every other field as written (`steps` of a parallel step as Steps)."""
    args = {k: v for k, v in raw.items() if k not in ("op", "module", "method")}
    if parsed.op == "parallel":
        args["steps"] = tuple(_step(r, p) for r, p in zip(raw["steps"], parsed.steps))
    return Step(parsed.op, parsed.module, parsed.method, args)


def parse_scenario(doc: dict[str, Any]) -> list[Step]:
    """Validate a scenario document (as runners receive it: `harness.protocol.scenario_check`) and return its
    steps."""
    parsed = validate_scenario(doc).steps
    return [_step(raw, step) for raw, step in zip(doc["steps"], parsed)]
