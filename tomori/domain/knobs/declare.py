"""How a knob is declared: a typed field of a group class, its metadata the rest."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

# The Python type each kind parses to (the type of its field in `Knobs`).
PYTHON_TYPES: dict[str, type] = {
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "url": str,
    "ip": str,
    "path": Path,
}
# The kind an annotation gives when the declaration names none.
_KIND_OF_TYPE: dict[type, str] = {
    int: "int",
    float: "float",
    bool: "bool",
    str: "str",
    Path: "path",
}
_METADATA_KEY = "knob"
_CAP_HELP = (
    "Entry cap of the {what}; inserting at the cap evicts expired entries "
    "first, then the oldest-inserted."
)


@dataclass(frozen=True)
class Knob:
    """One env variable: how to parse it, what it defaults to, what it does."""

    name: str
    # "int", "float", "bool", "str", "url" (http(s), with a host), "ip", "path"
    kind: str
    default: Any
    help: str
    group: str
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False  # an empty or unset value means None...
    fallback: str | None = None  # ...or, if named, that other knob's value

    def expected(self) -> str:
        """Describe the accepted values, for error messages and the settings doc."""
        words = {
            "bool": "one of 1/true/yes/on or 0/false/no/off",
            "str": "a string",
            "url": "an http:// or https:// URL with a host",
            "ip": "an IPv4 or IPv6 address, e.g. 127.0.0.1, 0.0.0.0 or ::",
            "path": "a file path",
        }
        if self.kind in words:
            return words[self.kind]
        noun = "an integer" if self.kind == "int" else "a number"
        low, high = self.minimum, self.maximum
        if low is not None and high is not None:
            return f"{noun} from {_fmt(low)} to {_fmt(high)}"
        if low is not None:
            return f"{noun} >= {_fmt(low)}"
        return noun


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class _Declared:
    """What a field's declaration says beyond its name, type and group."""

    default: Any
    help: str
    kind: str | None
    minimum: float | None
    maximum: float | None
    fallback: str | None


def knob(
    default: Any,
    help: str,
    *,
    kind: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    fallback: str | None = None,
) -> Any:
    """Declare the knob of the field this is assigned to; its annotation is its type.

    `int`, `float`, `bool`, `str` and `Path` give the kind; `kind` names one
    only for the strings parsed on their own ("url", "ip"). An `X | None`
    annotation makes the knob optional (unset or empty: None); `fallback`
    names the knob whose value an unset one takes (annotated without None).
    The field itself has no default: `Knobs` is only built from a full table.
    """
    declared = _Declared(default, help, kind, minimum, maximum, fallback)
    return dataclasses.field(metadata={_METADATA_KEY: declared})


def minutes(default: int, help: str) -> Any:
    """Declare a TTL in minutes (at least 1)."""
    return knob(default, help, minimum=1)


def cap(default: int, what: str) -> Any:
    """Declare the entry cap of a cache map (`what` names it, in the help)."""
    return knob(default, _CAP_HELP.format(what=what), minimum=1, maximum=10_000_000)


def knob_table(cls: type) -> tuple[Knob, ...]:
    """Return the rows of `cls`'s knobs: each base's fields in order, its GROUP theirs.

    Raises TypeError when a field is declared outside a group base, twice, without
    `knob()`, with a type its kind does not parse to, or with a bad default or
    fallback: a mistake in a declaration stops the import.
    """
    rows = tuple(_rows_of_bases(cls))
    names = [row.name for row in rows]
    if len(set(names)) != len(names):
        twice = sorted({name for name in names if names.count(name) > 1})
        raise TypeError(f"{cls.__name__}: knobs declared in two groups: {twice}")
    outside = sorted({f.name for f in dataclasses.fields(cls)} - set(names))
    if outside:
        raise TypeError(f"{cls.__name__}: knobs declared outside a group: {outside}")
    by_name = {row.name: row for row in rows}
    for row in rows:
        _check_fallback(row, by_name)
    return rows


def _rows_of_bases(cls: type) -> Iterator[Knob]:
    for base in cls.__bases__:
        group = base.__dict__.get("GROUP")
        if not isinstance(group, str) or not dataclasses.is_dataclass(base):
            raise TypeError(
                f"{base.__name__} is not a knob group (a dataclass with GROUP)"
            )
        hints = get_type_hints(base)
        for field in dataclasses.fields(base):
            yield _row(field, hints[field.name], group=group)


def _row(field: dataclasses.Field[Any], hint: Any, *, group: str) -> Knob:
    declared = field.metadata.get(_METADATA_KEY)
    if not isinstance(declared, _Declared):
        raise TypeError(f"{field.name} is not declared with knob(), minutes() or cap()")
    base, optional = _unwrap_optional(hint)
    kind = declared.kind or _KIND_OF_TYPE.get(base)
    if kind is None or PYTHON_TYPES.get(kind) is not base:
        raise TypeError(
            f"{field.name} is annotated {hint}, which its kind {kind!r} does not parse to"
        )
    if optional and declared.fallback:
        raise TypeError(f"{field.name} has a fallback, so it is never None: drop None")
    row = Knob(
        field.name,
        kind,
        declared.default,
        declared.help,
        group,
        minimum=declared.minimum,
        maximum=declared.maximum,
        optional=optional or declared.fallback is not None,
        fallback=declared.fallback,
    )
    _check_default(row)
    return row


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if get_origin(hint) in (Union, types.UnionType):
        others = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(others) == 1:
            return others[0], True
    return hint, False


def _check_default(row: Knob) -> None:
    if row.default is None:
        if not row.optional:
            raise TypeError(f"{row.name} defaults to None but is not optional")
        return
    if type(row.default) is not PYTHON_TYPES[row.kind] or not _in_bounds(row):
        raise TypeError(f"{row.name}'s default {row.default!r} is not {row.expected()}")


def _in_bounds(row: Knob) -> bool:
    if row.kind not in ("int", "float"):
        return True
    value: float = row.default
    low, high = row.minimum, row.maximum
    return (low is None or value >= low) and (high is None or value <= high)


def _check_fallback(row: Knob, by_name: dict[str, Knob]) -> None:
    if row.fallback is None:
        return
    target = by_name.get(row.fallback)
    if target is None or target.kind != row.kind or target.optional:
        raise TypeError(
            f"{row.name} falls back to {row.fallback}, which is not a "
            f"required {row.kind} knob"
        )
