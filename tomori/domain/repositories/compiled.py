"""A hot read's ORM query, compiled once per thread, run again with new values.

Compiling a queryset to SQL costs the database thread about 200 us of CPU,
several times the round trip itself; the few reads a turn's miss makes (a
user row, a short-term memory row) repeat the same query with another id.
`CompiledRead` builds the queryset once (`make(*probes)`), keeps its SQL, the
positions of the probe values among its parameters and the compiler's
converters for its columns, and each call binds its own values there and
converts the rows as the ORM would. The ORM stays the one description of
the query: tables, columns, joins and ordering come from the models.

Only fixed-arity queries whose parameters are ints or strings qualify (their
database form is the value itself on every backend: checked when compiled);
an `__in` lookup qualifies compiled at one list length.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet

#: Probe values, one per argument: an int and a str form, unlikely elsewhere.
_INT_PROBE = 7_000_000_000_000_000_000
_STR_PROBE = "\x01compiled-read-probe-"


class _Compiled:
    """The SQL, parameter slots and converters of one query on one connection."""

    __slots__ = ("sql", "params", "slots", "converters")

    def __init__(
        self,
        sql: str,
        params: list[Any],
        slots: list[tuple[int, int]],
        converters: list[tuple[int, Any, Any]],
    ) -> None:
        self.sql = sql
        self.params = params
        self.slots = slots  # (parameter position, argument index)
        self.converters = converters  # (column, converter list, expression)


class CompiledRead:
    """One read's query, compiled on first use in each thread; `rows(*values)` runs it."""

    def __init__(
        self, make: Callable[..., QuerySet[Any, Any]], kinds: Sequence[type]
    ) -> None:
        """`make(*values)` returns the queryset; `kinds` is each value's type (int or str)."""
        for kind in kinds:
            if kind not in (int, str):
                raise TypeError(f"CompiledRead binds ints and strings, not {kind}")
        self._make = make
        self._kinds = tuple(kinds)
        self._local = threading.local()

    def rows(self, *values: Any) -> list[list[Any]]:
        """Return the query's rows for `values`, converted as the ORM converts them."""
        connection = connections[DEFAULT_DB_ALIAS]
        compiled = getattr(self._local, "compiled", None)
        if (
            compiled is None
            or getattr(self._local, "vendor", None) != connection.vendor
        ):
            compiled = self._local.compiled = self._compile()
            self._local.vendor = connection.vendor
        params = list(compiled.params)
        for position, index in compiled.slots:
            params[position] = values[index]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = [list(row) for row in cursor.fetchall()]
        for column, convs, expression in compiled.converters:
            for row in rows:
                value = row[column]
                for converter in convs:
                    value = converter(value, expression, connection)
                row[column] = value
        return rows

    def _compile(self) -> _Compiled:
        probes = [
            _INT_PROBE + i if kind is int else f"{_STR_PROBE}{i}"
            for i, kind in enumerate(self._kinds)
        ]
        compiler = self._make(*probes).query.get_compiler(using=DEFAULT_DB_ALIAS)
        sql, params = compiler.as_sql()
        slots = [
            (position, probes.index(param))
            for position, param in enumerate(params)
            if param in probes
        ]
        if sorted({index for _, index in slots}) != list(range(len(probes))):
            raise ValueError(
                "a value was not bound as itself: not a CompiledRead query"
            )
        expressions = [column for column, _, _ in compiler.select]
        converters = [
            (column, convs, expression)
            for column, (convs, expression) in compiler.get_converters(
                expressions
            ).items()
        ]
        return _Compiled(sql, list(params), slots, converters)
