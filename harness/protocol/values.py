"""Non-tensor outputs (`harness.protocol.scenario_file.VALUE_KINDS`): an int, a double, a bool,
a string or none, or a list of ints, doubles or bools, as a method returns them (the metadata
methods of an LLM export). One encoding for both runners and the harness: the bytes a value's
`sha256` and `data` cover and an `expected` value file holds (`value_bytes`, `read_value`),
and one comparison (`compare_value`: a double within tolerance like a float scalar, everything
else exactly).

Cheap to import: the standard library only.
"""

from __future__ import annotations

import math
import struct
from harness.protocol.scenario_file import VALUE_KINDS

Scalar = bool | int | float | str | None
Value = Scalar | list[bool] | list[int] | list[float] | list[float | None]
"""A non-tensor output as JSON carries it (`Output.value`); a double that is not finite is
null there (JSON has no NaN): its `data` and `sha256` still hold its bytes."""

_ITEM = {"int": "<q", "float": "<d"}


def kind_of(value: object) -> str | None:
    """The VALUE_KINDS name of one Python value, or None when it is none of them."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return None


def value_bytes(kind: str, value: object) -> bytes:
    """The canonical bytes of a value of `kind` (a list: its items' bytes in order)."""
    items = value if isinstance(value, list) else [value]
    if kind == "string":
        assert isinstance(value, str)
        return value.encode("utf-8", "surrogatepass")
    if kind == "none":
        return b""
    if kind == "boolean":
        return bytes(1 if v else 0 for v in items)
    return b"".join(struct.pack(_ITEM[kind], v) for v in items)


def read_value(kind: str, shape: tuple[int, ...] | list[int], raw: bytes) -> Value:
    """The value a value file (or an output's `data`) of `kind` and `shape` holds. ValueError
    when the bytes do not fit."""
    if kind not in VALUE_KINDS:
        raise ValueError(f"{kind!r} is not a value kind ({', '.join(VALUE_KINDS)})")
    if kind == "string":
        return raw.decode("utf-8", "surrogatepass")
    if kind == "none":
        return None
    size = VALUE_KINDS[kind] or 1
    count = shape[0] if shape else 1
    if len(raw) != count * size:
        raise ValueError(f"a {kind} value of shape {list(shape)} has {count * size} bytes, "
                         f"got {len(raw)}")
    if kind == "boolean":
        items: list[bool] | list[float] = [b != 0 for b in raw]
    else:
        items = [struct.unpack_from(_ITEM[kind], raw, i * size)[0] for i in range(count)]
    return items if shape else items[0]


def json_value(kind: str, value: Value) -> Value:
    """`value` as an event's `value` field carries it: a double that is not finite as null."""
    if kind != "float":
        return value
    if isinstance(value, list):
        return [v if math.isfinite(v) else None for v in value]  # type: ignore[arg-type]
    return value if value is not None and math.isfinite(value) else None  # type: ignore[arg-type]


def shown(kind: str, value: Value) -> str:
    """A value for a message as JSON writes it (the native runner's words): a string quoted, a
    list in brackets, true, null."""
    import json

    return json.dumps(value)


def a(kind: str) -> str:
    """`kind` with its article: "an int", "a string"."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def compare_value(got_kind: str, got: Value, want_kind: str, want: Value, atol: float,
                  rtol: float) -> tuple[str, float]:
    """("" when `got` matches `want`, else why; the largest |got - want| of a number kind).
    A double compares within atol + rtol * |want| (NaN never), every other kind exactly."""
    if got_kind != want_kind:
        return f"is {a(got_kind)} ({shown(got_kind, got)}), expected {a(want_kind)}", 0.0
    gots = got if isinstance(got, list) else [got]
    wants = want if isinstance(want, list) else [want]
    if isinstance(got, list) != isinstance(want, list) or len(gots) != len(wants):
        return f"is {shown(got_kind, got)}, expected {shown(want_kind, want)}", 0.0
    worst = 0.0
    bad = False
    for g, w in zip(gots, wants):
        if want_kind in ("int", "float"):
            diff = abs(float(g) - float(w))  # type: ignore[arg-type]
            if not math.isnan(diff):
                worst = max(worst, diff)
            within = diff <= atol + rtol * abs(float(w))  # type: ignore[arg-type]
            bad = bad or (g != w if want_kind == "int" else not within)
        else:
            bad = bad or g != w
    if bad:
        return f"is {shown(got_kind, got)}, expected {shown(want_kind, want)}", worst
    return "", worst
