"""Strict pydantic schemas for the harness's YAML files, with errors that point into the file.

Shared by the device configs (`harness.config`) and the known-issues file. A model derives from
`StrictModel`: unknown keys are errors at every depth (a misspelt `htp_context_kbb` must not
silently become the default), values are not coerced (`htp_arch: "75"` is an error; an int
where a float is expected is fine), and loaded configs are immutable.

`load_validated` turns a `pydantic.ValidationError` into one `ConfigError` that lists every
error of the file, one per line, each with the line of the offending key in the YAML file (from
the composed node tree), the dotted key path (`memory.htp_context_kbb`, `devices[0].sco`) and
pydantic's message; for an unknown key also the keys allowed at that level and the closest one:

    device_configs/socs/SM8650.yaml: invalid SoC config:
      line 8: memory.htp_context_kbb: Extra inputs are not permitted (unknown key; allowed here:
      dsp_heap_context_kb, dsp_heap_leak_kb, htp_context_kb, rss_leak_kb, ...); did you mean 'htp_context_kb'?
"""

from __future__ import annotations

import difflib
import stat
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import pydantic
import yaml
from pydantic import ConfigDict

from harness.errors import ConfigError

__all__ = ["StrictModel", "format_validation_error", "load_validated", "load_yaml_node",
           "validate_data"]


class StrictModel(pydantic.BaseModel):
    """Base of every file schema: unknown keys forbidden, no coercion, immutable.

    Strict mode still accepts an int where a float is expected (`runner_s: 120`), never a bool
    for an int, nor a string for a number.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


M = TypeVar("M", bound=pydantic.BaseModel)

MAX_YAML_DEPTH = 64
"""How deeply collections may nest in a config file. The project's files nest five levels at
most; PyYAML composes (and constructs) a document by recursion, three Python frames a level,
so a file of 20000 nested `[` exhausted the interpreter's stack: a `RecursionError` traceback
(pytest's INTERNALERROR). 64 levels cost about 200 frames, well inside the default limit of
1000 wherever the file is loaded from."""


class _BoundedLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a node nested deeper than `MAX_YAML_DEPTH`.

    The depth is counted where the recursion is, in the composer: PyYAML's scanner and parser
    are loops over explicit stacks, so a deep file reaches `compose_node` intact and is stopped
    at its first node beyond the limit, whose mark gives the line. Catching `RecursionError`
    instead would depend on how deep the caller's own stack already is (pytest's is deeper than
    the CLI's: one file, two verdicts) and would run the handler with no stack left; a scan of
    the text for brackets and indentation would miscount quoted strings, comments and block
    scalars."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"collections nested more than {MAX_YAML_DEPTH} levels deep "
                    "(no config of the harness nests more than a few)",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml_node(path: Path, text: str | None = None) -> tuple[Any, yaml.Node | None]:
    """Parse `path` once: `(data, node)`, the Python data (as `yaml.safe_load` gives it) and the
    composed node tree it was built from (None for an empty file), whose marks give lines.
    `text`: the file's content when the caller has read it already (the file is not read again).

    A missing file or malformed YAML is a `ConfigError` naming the file, line and column; so
    is a file whose collections nest deeper than `MAX_YAML_DEPTH` (see `_BoundedLoader`).
    """
    path = Path(path)
    if text is not None:
        return _parse(path, text)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        # a directory was an IsADirectoryError (pytest's INTERNALERROR); a FIFO hung the read
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a special file")
        raise ConfigError(f"{path}: is {kind}, not a YAML file: give the path of the file")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    return _parse(path, text)


def _parse(path: Path, text: str) -> tuple[Any, yaml.Node | None]:
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", exc)
        raise ConfigError(f"{path}:{where}: malformed YAML: {problem}") from None
    finally:
        loader.dispose()
    return data, node


def load_validated(path: Path, model: type[M], *, what: str, empty_ok: bool = False,
                   text: str | None = None) -> M:
    """Load the YAML file `path` and validate it as `model`.

    `what` names the kind of file in messages ("SoC config", "farm file"). Every validation
    error of the file is reported in one `ConfigError` (first line `<path>: invalid <what>:`).
    A top level that is not what the model expects (a mapping, or a list for a
    `RootModel[list[...]]`) is a `ConfigError` too; so is an empty file unless `empty_ok`, in
    which case it is validated as an empty mapping or list. `text`: the file's content, when
    the caller has read it already.
    """
    path = Path(path)
    data, node = load_yaml_node(path, text)
    kind = _top_level_kind(model)
    if data is None and empty_ok and kind is not None:
        data = [] if kind == "list" else {}
    elif kind is not None and not isinstance(data, list if kind == "list" else dict):
        got = "an empty file" if data is None else _kind_name(data)
        raise ConfigError(f"{path}: invalid {what}: expected a {kind} at the top level, got {got}")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, source=str(path), what=what,
                                                  node=node)) from None


def validate_data(data: Any, model: type[M], *, source: str, what: str) -> M:
    """Validate a Python object that did not come from a file (an option, one entry built in
    code) as `model`; errors are formatted like `load_validated`'s, without line numbers, under
    the heading `<source>: invalid <what>:`."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, source=source, what=what)) from None


def format_validation_error(exc: pydantic.ValidationError, model: type[pydantic.BaseModel], *,
                            source: str, what: str, node: yaml.Node | None = None) -> str:
    """The message of a `ValidationError` of `model`: `<source>: invalid <what>:` then one
    indented line per error, `line N: <key path>: <message>`; without `node` (the YAML node tree
    the data was built from) there are no line numbers."""
    entries = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        line = _line_of(node, loc) if node is not None else None
        text = f"{_dotted(loc)}: {_describe(err, loc, model)}"
        entries.append((line or 0, f"line {line}: {text}" if line else text))
    entries.sort(key=lambda e: e[0])  # stable: pydantic's order within a line
    return "\n".join([f"{source}: invalid {what}:"] + [f"  {text}" for _, text in entries])


# -- locating an error in the YAML node tree ------------------------------------------------------

def _line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the deepest node of `loc` present in the file: the line of the key itself
    for a wrong or unknown key, of the parent mapping's key for a missing one."""
    if root is None:
        return None
    node, line = root, root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            # the last duplicate wins, as in the constructed data
            found = [(k, v) for k, v in node.value
                     if isinstance(k, yaml.ScalarNode) and k.value == str(part)]
            if not found:
                break
            key, node = found[-1]
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# -- describing an error --------------------------------------------------------------------------

def _describe(err: Mapping[str, Any], loc: tuple, model: type[pydantic.BaseModel]) -> str:
    kind, msg = err.get("type", ""), err.get("msg", "")
    if kind == "extra_forbidden" and loc:
        allowed = _keys_of(_annotation_at(model, loc[:-1]))
        text = f"{msg} (unknown key"
        text += f"; allowed here: {', '.join(allowed)})" if allowed else ")"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if allowed else []
        return text + (f"; did you mean '{close[0]}'?" if close else "")
    if kind == "missing":
        expected = _type_label(_annotation_at(model, loc))
        return f"{msg} (missing required key{', expected ' + expected if expected else ''})"
    if kind.endswith("_type") or kind in ("literal_error", "enum"):
        value = err.get("input")
        text = f"{msg}, got {_kind_name(value)}"
        if value is not None and not isinstance(value, (dict, list)):
            text += f" {_short_repr(value)}"
        if kind == "string_type" and isinstance(value, (int, float, bool)):
            text += " (quote it in the YAML to make it a string)"
        return text
    return msg


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _kind_name(value: Any) -> str:
    if value is None:
        return "null (no value)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


# -- walking the model along a loc ----------------------------------------------------------------

def _unwrap(tp: Any) -> Any:
    """Strip Annotated, Optional (a union with None and one other type) and RootModel."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        elif isinstance(tp, type) and issubclass(tp, pydantic.RootModel):
            tp = tp.model_fields["root"].annotation
        else:
            return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


def _fields(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    return {(f.alias or name): f for name, f in model.model_fields.items()}


def _annotation_at(model: Any, loc: tuple) -> Any:
    """The annotated type at `loc` inside `model`, or None when the walk leaves the schema."""
    tp = model
    for part in loc:
        tp = _unwrap(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if isinstance(part, str) and _is_model(tp):
            field = _fields(tp).get(part)
            if field is None:
                return None
            tp = field.annotation
        elif isinstance(part, int) and origin in (list, tuple, set, frozenset, Sequence):
            tp = args[0] if args else Any
        elif origin is dict and len(args) == 2:
            tp = args[1]
        else:
            return None
    return _unwrap(tp)


def _keys_of(tp: Any) -> list[str]:
    return sorted(_fields(tp)) if _is_model(tp) else []


def _top_level_kind(model: type[pydantic.BaseModel]) -> str | None:
    tp = _unwrap(model)
    origin = typing.get_origin(tp)
    if _is_model(tp) or origin is dict or tp is dict:
        return "mapping"
    if origin in (list, tuple, set, frozenset, Sequence) or tp in (list, tuple):
        return "list"
    return None


def _type_label(tp: Any) -> str:
    if tp is None or tp is Any:
        return ""
    if _is_model(tp):
        return "a mapping"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return repr(args[0]) if len(args) == 1 else "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, set, frozenset, Sequence):
        inner = _type_label(_unwrap(args[0])) if args else ""
        return f"a list (items: {inner})" if inner else "a list"
    if origin is dict:
        return "a mapping"
    if origin in (Union, types.UnionType):
        return " or ".join(filter(None, (_type_label(_unwrap(a)) for a in args)))
    if tp is float:
        return "number"
    return getattr(tp, "__name__", str(tp))
