"""Checking a scenario document against the protocol, as a runner does before its first step:
`validate_scenario` (the parsed JSON), `load_scenario` / `check_scenario` (and its files:
`missing_files`, `check_tensor_sizes`). Each rejects what cannot be run (exit 2) with a
ScenarioError naming the step and field.

Written by hand, not with pydantic or jsonschema: the Python runner imports it in every fresh
runner process, where those cost more than the run (tests/framework/test_protocol.py
test_cheap_to_import), and its messages are the ones the native runner writes too.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from harness.protocol.scenario_file import (DEFAULT_LOAD_MODE, DTYPES, GET_OPTION_TYPES,
                                            LOAD_MODES, MAX_BACKEND_NAME_BYTES, MAX_BACKENDS,
                                            MAX_OPTION_KEY_BYTES, MAX_OPTION_STRING_BYTES,
                                            MAX_PARALLEL, MAX_SHAPE_ENTRY, OP_FIELDS,
                                            OPS, OPTION_INT_RANGE, PARALLEL_OPS,
                                            SCENARIO_VERSION, DecodeSpec, OptionValue, ScenarioError,
                                            ScenarioFile, ScenarioStep, TensorSpec,
                                            VALUE_KINDS)
from harness.protocol.nemesis import NemesisError, check_rules
from harness.protocol.wire import is_int, is_number, json_kind, parse_json


class _StepReader:
    def __init__(self, raw: Any, where: str, ops: tuple[str, ...]) -> None:
        self.raw, self.where, self.ops = raw, where, ops

    def fail(self, what: str) -> typing.NoReturn:
        raise ScenarioError(f"{self.where}: {what}")

    def string(self, key: str) -> str:
        value = self.raw[key]
        if not isinstance(value, str) or not value:
            self.fail(f"field '{key}' must be a non-empty string, got {json_kind(value)} {value!r}")
        return value

    def number(self, key: str) -> float:
        value = self.raw.get(key)
        if value is None:
            return 0.0
        if not is_number(value) or not value >= 0:
            self.fail(f"field '{key}' must be a number >= 0, got {json_kind(value)} {value!r}")
        return float(value)

    def option_value(self, value: Any, where: str) -> OptionValue:
        if isinstance(value, bool):
            return value
        if is_int(value):
            low, high = OPTION_INT_RANGE
            if not low <= value <= high:
                self.fail(f"{where}: integer option value out of int range")
            return int(value)
        if isinstance(value, str):
            if len(value.encode()) > MAX_OPTION_STRING_BYTES:
                self.fail(f"{where}: string option value longer than "
                          f"{MAX_OPTION_STRING_BYTES} characters")
            return value
        self.fail(f"{where}: option values must be bool, int or string, got {json_kind(value)}")

    def option_key(self, key: str, where: str) -> str:
        if not key or len(key.encode()) > MAX_OPTION_KEY_BYTES:
            self.fail(f"{where}: option key must have 1 to {MAX_OPTION_KEY_BYTES} characters")
        return key

    def backend_options(self) -> dict[str, dict[str, OptionValue]]:
        raw = self.raw.get("backend_options")
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.fail(f"field 'backend_options' must be an object, got {json_kind(raw)}")
        out: dict[str, dict[str, OptionValue]] = {}
        for backend, options in raw.items():
            if not isinstance(options, dict):
                self.fail(f"backend_options['{backend}'] must be an object")
            if not backend or len(backend.encode()) > MAX_BACKEND_NAME_BYTES:
                self.fail("backend_options: backend name must have 1 to "
                          f"{MAX_BACKEND_NAME_BYTES} characters")
            out[backend] = {}
            for key, value in options.items():
                where = f"backend_options['{backend}']['{key}']"
                out[backend][self.option_key(key, where)] = self.option_value(value, where)
        if len(out) > MAX_BACKENDS:
            self.fail(f"backend_options: at most {MAX_BACKENDS} backends")
        return out

    def feed(self, inputs: int) -> tuple[tuple[int, int], ...]:
        raw = self.raw.get("feed")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.fail(f"field 'feed' must be an array, got {json_kind(raw)}")
        pairs: list[tuple[int, int]] = []
        for i, pair in enumerate(raw):
            if not (isinstance(pair, list) and len(pair) == 2 and all(
                    is_int(v) and 0 <= v <= MAX_SHAPE_ENTRY for v in pair)):
                self.fail(f"feed[{i}] must be [input index, output index], two non-negative "
                          "integers")
            if pair[0] >= inputs:
                self.fail(f"feed[{i}]: input {pair[0]} is not one of the step's {inputs} inputs")
            if any(pair[0] == p[0] for p in pairs):
                self.fail(f"feed[{i}]: input {pair[0]} is fed twice")
            pairs.append((int(pair[0]), int(pair[1])))
        return tuple(pairs)

    def decode(self, inputs: tuple[TensorSpec, ...],
               feed: tuple[tuple[int, int], ...]) -> DecodeSpec | None:
        raw = self.raw.get("decode")
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.fail(f"field 'decode' must be an object, got {json_kind(raw)}")
        unknown = sorted(set(raw) - {"token", "past", "new", "caches"})
        if unknown:
            self.fail(f"decode: unknown field '{unknown[0]}'")

        def ints(value: Any, n: int, where: str, what: str) -> list[int]:
            if not (isinstance(value, list) and len(value) == n and all(
                    is_int(v) and 0 <= v <= MAX_SHAPE_ENTRY for v in value)):
                self.fail(f"decode: {where} must be {what}")
            return [int(v) for v in value]

        token, logits, row, vocab = ints(raw.get("token"), 4, "'token'",
                                         "[input, output, row, vocab], non-negative integers")
        past, new = (ints([raw.get(k)], 1, f"'{k}'", "a non-negative integer")[0]
                     for k in ("past", "new"))
        if vocab == 0 or new == 0:
            self.fail("decode: 'vocab' and 'new' must be positive")
        caches_raw = raw.get("caches", [])
        if not isinstance(caches_raw, list):
            self.fail(f"decode: 'caches' must be an array, got {json_kind(caches_raw)}")
        caches = [tuple(ints(c, 3, f"caches[{i}]", "[input, output, axis], non-negative "
                             "integers")) for i, c in enumerate(caches_raw)]
        used = [token, *(c[0] for c in caches)]
        for i in used:
            if i >= len(inputs):
                self.fail(f"decode: input {i} is not one of the step's {len(inputs)} inputs")
        if len(set(used)) != len(used) or set(used) & {i for i, _ in feed}:
            self.fail("decode: the token and cache inputs must be distinct and not fed")
        for i, (index, _, axis) in enumerate(caches):
            if axis >= len(inputs[index].shape):
                self.fail(f"decode: caches[{i}]: axis {axis} is not an axis of input {index} "
                          f"(shape {list(inputs[index].shape)})")
        if inputs[token].dtype not in ("int32", "int64"):
            self.fail(f"decode: input {token} takes the token: it must be int32 or int64, not "
                      f"{inputs[token].dtype}")
        return DecodeSpec(token, logits, row, vocab, past, new,
                          tuple(typing.cast(tuple[int, int, int], c) for c in caches))

    def tensors(self, key: str) -> tuple[TensorSpec, ...]:
        raw = self.raw.get(key)
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.fail(f"field '{key}' must be an array, got {json_kind(raw)}")
        specs = []
        for i, t in enumerate(raw):
            where = f"{key}[{i}]"
            if not isinstance(t, dict):
                self.fail(f"{where} must be an object, got {json_kind(t)}")
            dtype = t.get("dtype")
            if not isinstance(dtype, str):
                self.fail(f"{where}: missing string field 'dtype'")
            values = key == "expected"  # a method's output may be a non-tensor value
            if dtype not in DTYPES and not (values and dtype in VALUE_KINDS):
                names = [*DTYPES, *(VALUE_KINDS if values else ())]
                self.fail(f"{where}: unknown dtype '{dtype}' (expected "
                          f"{', '.join(names[:-1])} or {names[-1]})")
            shape = t.get("shape")
            if not isinstance(shape, list):
                self.fail(f"{where}: missing array field 'shape'")
            if not all(is_int(d) and 0 <= d <= MAX_SHAPE_ENTRY for d in shape):
                self.fail(f"{where}: shape entries must be non-negative integers, got {shape!r}")
            if dtype in VALUE_KINDS and (len(shape) > 1 or (
                    dtype in ("string", "none") and shape)):
                self.fail(f"{where}: a {dtype} value has shape [] (one value)"
                          + ("" if dtype in ("string", "none") else " or [n] (a list of n)")
                          + f", got {shape!r}")
            file = t.get("file")
            if not isinstance(file, str) or not file:
                self.fail(f"{where}: missing string field 'file'")
            specs.append(TensorSpec(dtype, tuple(shape), file))
        return tuple(specs)

    def read(self) -> ScenarioStep:
        raw = self.raw
        if not isinstance(raw, dict) or raw.get("op") not in self.ops:
            self.fail(f"'op' must be one of {', '.join(self.ops)}, got "
                      f"{raw.get('op') if isinstance(raw, dict) else raw!r}")
        op = raw["op"]
        self.where = f"{self.where} ({op})"
        spec = OP_FIELDS[op]
        missing = [k for k in spec.required if raw.get(k) is None]
        if missing:
            self.fail(f"missing {', '.join(missing)}")
        known = {"op", *spec.required, *spec.optional}
        extra = {k: v for k, v in raw.items() if k not in known}
        fields: dict[str, Any] = {}
        if "module" in spec.required:
            fields["module"] = self.string("module")
        if "method" in spec.required:
            fields["method"] = self.string("method")
        if op == "load_module":
            fields["pte"] = self.string("pte")
            fields["backend_options"] = self.backend_options()
            mode = raw.get("load_mode")
            if mode is not None and mode not in LOAD_MODES:
                self.fail(f"field 'load_mode' must be one of {', '.join(LOAD_MODES)}, got "
                          f"{json_kind(mode)} {mode!r}")
            fields["load_mode"] = mode or DEFAULT_LOAD_MODE
        elif op == "execute":
            fields["inputs"] = self.tensors("inputs")
            fields["expected"] = self.tensors("expected")
            fields["atol"] = self.number("atol")
            fields["rtol"] = self.number("rtol")
            emit = raw.get("emit_outputs")
            if emit is not None and not isinstance(emit, bool):
                self.fail(f"field 'emit_outputs' must be a bool, got {json_kind(emit)} {emit!r}")
            fields["emit_outputs"] = bool(emit)
            shared = raw.get("shared_inputs")
            if shared is not None and not isinstance(shared, bool):
                self.fail(f"field 'shared_inputs' must be a bool, got {json_kind(shared)} {shared!r}")
            fields["shared_inputs"] = bool(shared)
            fields["feed"] = self.feed(len(fields["inputs"]))
            fields["decode"] = self.decode(fields["inputs"], fields["feed"])
        elif op in ("set_option", "get_option"):
            fields["backend"] = self.string("backend")
            fields["key"] = self.option_key(self.string("key"), "key")
            if op == "set_option":
                fields["value"] = self.option_value(raw["value"], "value")
            else:
                kind = raw.get("type")
                if kind is None:
                    kind = "int"
                if kind not in GET_OPTION_TYPES:
                    self.fail(f"field 'type' must be int, bool or string, got {kind!r}")
                fields["type"] = kind
        elif op == "parallel":
            fields["steps"] = self.substeps()
        return ScenarioStep(op, extra=extra, **fields)

    def substeps(self) -> tuple[ScenarioStep, ...]:
        subs = self.raw["steps"]
        if not isinstance(subs, list) or not 1 <= len(subs) <= MAX_PARALLEL:
            self.fail(f"'steps' must be a list of 1 to {MAX_PARALLEL} sub-steps")
        base = self.where.rsplit(" (", 1)[0]
        steps = [_StepReader(sub, f"{base} sub-step {j}", PARALLEL_OPS).read()
                 for j, sub in enumerate(subs)]
        check_distinct_modules([s.module for s in steps], self.where)
        return tuple(steps)


def check_distinct_modules(modules: list[str | None], where: str) -> None:
    """The sub-steps of a parallel step each name a different module."""
    seen: set[str | None] = set()
    for module in modules:
        if module in seen:
            raise ScenarioError(f"{where}: two sub-steps on module {module!r} (each sub-step "
                                "of a parallel step must use a different module)")
        seen.add(module)


def validate_scenario(doc: Any, base: Path | None = None) -> ScenarioFile:
    """Check a scenario document (the parsed JSON) against the protocol and return it typed.
    Raises ScenarioError naming the step and field. Files are not looked at
    (`missing_files`, `check_tensor_sizes`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ScenarioError("a scenario is an object with a 'steps' list")
    if "version" in doc and not (is_int(doc["version"]) and doc["version"] == SCENARIO_VERSION):
        raise ScenarioError(f"unsupported scenario version {doc['version']!r} (this runner "
                            f"reads {SCENARIO_VERSION})")
    name = doc.get("name")
    if name is not None and not isinstance(name, str):
        raise ScenarioError(f"field 'name' must be a string, got {json_kind(name)}")
    watch = doc.get("watch_mappings")
    if watch is not None and not (isinstance(watch, list)
                                  and all(isinstance(w, str) and w for w in watch)):
        raise ScenarioError("field 'watch_mappings' must be an array of paths")
    try:
        nemesis = check_rules(doc.get("qnn_nemesis"))
    except NemesisError as exc:
        raise ScenarioError(str(exc)) from None
    steps = tuple(_StepReader(raw, f"step {i}", OPS).read() for i, raw in enumerate(doc["steps"]))
    return ScenarioFile(steps, name or "", tuple(watch or ()), SCENARIO_VERSION, base=base,
                        qnn_nemesis=nemesis)


def missing_files(scenario: ScenarioFile) -> list[str]:
    """The program and tensor files the scenario names that are not regular files, as
    written."""
    return [n for n in scenario.files() if not scenario.path(n).is_file()]


def check_tensor_sizes(scenario: ScenarioFile) -> None:
    """Each tensor file has the size its shape and dtype need; ScenarioError otherwise."""
    for i, step in enumerate(scenario.steps):
        for j, s in enumerate(step.flat):
            where = f"step {i}" + (f" sub-step {j}" if step.op == "parallel" else "")
            for key, specs in (("inputs", s.inputs), ("expected", s.expected)):
                for k, t in enumerate(specs):
                    size = scenario.path(t.file).stat().st_size
                    if t.nbytes is not None and size != t.nbytes:
                        raise ScenarioError(f"{where} ({s.op}): {key}[{k}]: tensor file {t.file} "
                                            f"has {size} bytes, shape and dtype need {t.nbytes}")


def load_scenario(path: Path) -> ScenarioFile:
    """Read, validate and check the files of the scenario file at `path`, as a runner does
    before its first step. Raises ScenarioError with the message a runner prints."""
    path = Path(path)
    try:
        doc = parse_json(path.read_text())
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from None
    return check_scenario(doc, path.resolve().parent, str(path))


def check_scenario(doc: Any, base: Path, where: str) -> ScenarioFile:
    """Validate a scenario document whose relative paths are in `base` and check its files,
    as `load_scenario` does for a file (`where` names it in the errors)."""
    try:
        scenario = validate_scenario(doc, base)
    except ScenarioError as exc:
        raise ScenarioError(f"cannot read scenario {where}: {exc}") from None
    missing = missing_files(scenario)
    if missing:
        raise ScenarioError(f"scenario {where} names missing files: {', '.join(missing)}")
    try:
        check_tensor_sizes(scenario)
    except (OSError, ScenarioError) as exc:
        raise ScenarioError(f"scenario {where}: {exc}") from None
    return scenario
