"""What feeds a cache layer: the tables whose row changes invalidate it, declared with it.

A layer lists its feeds next to its key shape (`Layer(feeds=...)`): each
`Feed` names a model (table), the layer operation a changed row calls, the
arguments that operation takes as columns of the row (`Via` reads one
through another table, `Pair` makes a tuple key), and the columns whose
change matters (`fields`; None: every column). A layer no table feeds says
why instead (`NotFed`). The invalidation rules (`caches.rules`), the save
signals, the write-path tests and the database's own change recording all
derive from these declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

Row = Mapping[str, Any]


class Lookup(Protocol):
    """Reads one column of another table's row by primary key (None: row gone)."""

    def value(self, model: str, pk: Any, attname: str) -> Any: ...


@dataclass(frozen=True)
class Via:
    """A key part read through another table: `model.attname` of the row `column` points at."""

    column: str
    model: str
    attname: str

    def resolve(self, row: Row, lookup: Lookup) -> Any:
        """Return the looked-up value (None when the row it points at is gone)."""
        pk = row[self.column]
        return None if pk is None else lookup.value(self.model, pk, self.attname)


def server_disc_id_of(column: str = "server_id") -> Via:
    """Return the key part "Discord id of the server `column` points at"."""
    return Via(column, "tomori.Server", "server_disc_id")


@dataclass(frozen=True)
class Pair:
    """A tuple key made of several columns of the row, in order."""

    columns: tuple[str, ...]


Arg = str | Via | Pair


def _arg_columns(arg: Arg) -> tuple[str, ...]:
    if isinstance(arg, Via):
        return (arg.column,)
    if isinstance(arg, Pair):
        return arg.columns
    return (arg,)


def _arg_value(arg: Arg, row: Row, lookup: Lookup) -> Any:
    if isinstance(arg, Via):
        return arg.resolve(row, lookup)
    if isinstance(arg, Pair):
        parts = tuple(row[c] for c in arg.columns)
        return None if any(p is None for p in parts) else parts
    return row[arg]


@dataclass(frozen=True)
class Feed:
    """One table feeding a layer: a changed row of `model` calls `op(*args)`.

    `args` are read from the old row and from the new one (a row whose key
    moved invalidates both keys). `fields`: the columns whose change fires
    the feed besides the key columns (None: any column; (): only a key
    change, an insert or a delete). `m2m`: many-to-many fields of `model`
    whose changes fire it too.
    """

    model: str
    op: str
    args: tuple[Arg, ...] = ()
    fields: tuple[str, ...] | None = None
    m2m: tuple[str, ...] = ()

    @property
    def reads(self) -> tuple[str, ...]:
        """Return the row's columns the operation's arguments are made from."""
        return tuple(dict.fromkeys(c for arg in self.args for c in _arg_columns(arg)))

    @property
    def vias(self) -> tuple[Via, ...]:
        """Return the arguments read through another table."""
        return tuple(arg for arg in self.args if isinstance(arg, Via))

    def key_args(self, row: Row, lookup: Lookup) -> tuple[Any, ...] | None:
        """Return the operation's arguments for `row` (None: a part is unknown)."""
        values = tuple(_arg_value(arg, row, lookup) for arg in self.args)
        return None if any(v is None for v in values) else values


class NotFed(StrEnum):
    """Why no table feeds a layer, so no write has to invalidate it."""

    STATIC = "static: built from constants in the code, no table"
    IMMUTABLE = "immutable: a stored entry never changes; the TTL only bounds memory"
    TURN_WRITTEN = (
        "written by the bot's own turns and Discord events, not read from a table"
    )
    DISCORD = (
        "answered by Discord (webhooks' owners), not by a table; the TTL bounds it"
    )
