"""Database triggers that record every committed change to a feeding table in the outbox.

Django's own writes invalidate through their save signals; psql, another
service, a migration's SQL or a COPY send none. So each table a layer
declares as a feed (`Layer.feeds`) carries triggers, derived here from
those declarations, that write the invalidation events of every changed
row into `caches_invalidation_outbox` in the writer's own transaction:
committed with the change or not at all. The workers' outbox followers
deliver them like any other row.

PostgreSQL: one statement-level trigger per table and operation, reading
the statement's transition tables, so a 10,000-row UPDATE costs one INSERT
... SELECT, writes its distinct events in rows of at most `CHUNK` events,
and skips rows whose relevant columns did not change. TRUNCATE drops every
layer the table feeds. SQLite (the embedded mode): row-level triggers with
the same events (SQLite has no statement triggers and no TRUNCATE).

A Django write claims the rows its own statements recorded (`claim_sql`):
its outbox row holds their events and its own, so a change is stored and
delivered once. `sync(connection)` installs or refreshes the triggers (run
by the migration and after every `migrate`); `differences(connection)`
says how the installed triggers differ from the declarations.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from caches.layers import declared_layers
from caches.layers._feeds import Feed, Pair, Via
from caches.layers.declaration import Layer

OUTBOX = "caches_invalidation_outbox"
PREFIX = "tomori_inv_"
#: Events per outbox row a trigger writes (a worker parses and applies a row
#: in bounded steps on its loop: `caches.bus.applier`).
CHUNK = 100
#: The setting every PostgreSQL capture function runs with (see `_pg_trigger`).
PG_FUNCTION_SETTING = ("jit", "off")
#: The `tx` of a row a SQLite trigger wrote (no transaction ids there).
SQLITE_TX = -1


@dataclass(frozen=True)
class Source:
    """One table whose row changes feed a layer (directly or through an m2m table)."""

    table: str
    pk: str
    #: (layer, feed, owner) per feed: `owner` is the model whose row the
    #: feed reads, joined from an m2m table's column (None: this table's row).
    feeds: tuple[tuple[Layer, Feed, tuple[type[models.Model], str] | None], ...]
    columns: tuple[str, ...]


def _column(model: type[models.Model], attname: str) -> str:
    return str(model._meta.get_field(attname).column)  # type: ignore[union-attr]


def sources() -> dict[str, Source]:
    """Return every table to capture, by name, derived from the layers' feeds."""
    found: dict[str, list[Any]] = {}
    for layer in declared_layers().values():
        for feed in layer.feeds:
            model = apps.get_model(feed.model)
            found.setdefault(model._meta.db_table, [model, []])[1].append(
                (layer, feed, None)
            )
            for name in feed.m2m:
                field = model._meta.get_field(name)
                through = field.remote_field.through  # type: ignore[union-attr]
                owner_fk = field.m2m_column_name()  # type: ignore[union-attr]
                entry = found.setdefault(through._meta.db_table, [through, []])
                entry[1].append((layer, feed, (model, owner_fk)))
    return {
        table: Source(
            table,
            model._meta.pk.column,
            tuple(feeds),
            tuple(f.column for f in model._meta.concrete_fields),
        )
        for table, (model, feeds) in sorted(found.items())
    }


class Dialect:
    """The SQL spelling of one backend."""

    array = "jsonb_build_array"
    distinct = "IS DISTINCT FROM"

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def literal(self, text: str) -> str:
        return "'" + text.replace("'", "''") + "'"


class SqliteDialect(Dialect):
    array = "json_array"
    distinct = "IS NOT"


#: Where a `Via` of a row image was joined: (via, image) -> its column's SQL.
Joined = dict[tuple[Via, str], str]


def _arg_sql(
    d: Dialect, arg: Any, model: type[models.Model], row: str, joined: Joined
) -> str:
    if isinstance(arg, Via) and (arg, row) in joined:
        return joined[(arg, row)]
    if isinstance(arg, Via):
        target = apps.get_model(arg.model)
        return (
            f"(SELECT t.{d.quote(_column(target, arg.attname))} FROM "
            f"{d.quote(target._meta.db_table)} t WHERE t."
            f"{d.quote(target._meta.pk.column)} = {row}."
            f"{d.quote(_column(model, arg.column))})"
        )
    if isinstance(arg, Pair):
        parts = ", ".join(f"{row}.{d.quote(_column(model, c))}" for c in arg.columns)
        return f"{d.array}({parts})"
    return f"{row}.{d.quote(_column(model, arg))}"


def event_sql(
    d: Dialect, layer: Layer, feed: Feed, row: str, joined: Joined | None = None
) -> str:
    """Return the SQL of the event `feed` makes of the row aliased `row`.

    A key part that is NULL (the row a `Via` points at is gone) drops the
    whole layer, as the Python rules do. A `Via` in `joined` reads the
    joined row's column; any other is a subquery on the row it points at.
    """
    model = apps.get_model(feed.model)
    args = [_arg_sql(d, arg, model, row, joined or {}) for arg in feed.args]
    name, op = d.literal(layer.name), d.literal(feed.op)
    event = f"{d.array}({name}, {op}, {d.array}({', '.join(args)}))"
    if not args:
        return event
    nulls = " OR ".join(f"({a}) IS NULL" for a in args)
    every = f"{d.array}({name}, 'all', {d.array}())"
    return f"CASE WHEN {nulls} THEN {every} ELSE {event} END"


def changed_sql(
    d: Dialect, feed: Feed, old: str, new: str, *, keys_only: bool = False
) -> str:
    """Return the SQL condition "this feed's relevant columns changed".

    `keys_only`: "the columns its key is made of changed", the one case in
    which an updated row's old image makes another event than its new one.
    """
    model = apps.get_model(feed.model)
    every = [f.attname for f in model._meta.concrete_fields]
    relevant = every if feed.fields is None else feed.fields
    names = dict.fromkeys([*([] if keys_only else relevant), *feed.reads])
    tests = [
        f"{old}.{d.quote(_column(model, n))} {d.distinct} {new}.{d.quote(_column(model, n))}"
        for n in names
    ]
    return "(" + (" OR ".join(tests) or "FALSE") + ")"


OPS = {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}


def _event_rows(d: Dialect, src: Source, op: str, old: str, new: str) -> list[str]:
    """Return one SELECT per (feed, row image) yielding the events of `op` (SQLite)."""
    selects: list[str] = []
    for layer, feed, owner in src.feeds:
        if owner is not None:
            selects += _m2m_rows(d, src, layer, feed, owner, op, old, new)
            continue
        for image in {"ins": [new], "del": [old], "upd": [old, new]}[op]:
            other, pk = (new if image == old else old), d.quote(src.pk)
            changed = changed_sql(d, feed, old, new, keys_only=image == old)
            where = f" WHERE {other}.{pk} IS NULL OR {changed}" if op == "upd" else ""
            selects.append(f"SELECT {event_sql(d, layer, feed, image)} AS ev{where}")
    return selects


def _m2m_rows(
    d: Dialect,
    src: Source,
    layer: Layer,
    feed: Feed,
    owner: tuple[type[models.Model], str],
    op: str,
    old: str,
    new: str,
) -> list[str]:
    model, fk = owner
    ev = event_sql(d, layer, feed, "r")
    table, pk = d.quote(model._meta.db_table), d.quote(model._meta.pk.column)
    images = {"ins": [new], "del": [old], "upd": [old, new]}[op]
    if isinstance(d, SqliteDialect):
        return [
            f"SELECT {ev} AS ev FROM {table} r WHERE r.{pk} = {i}.{d.quote(fk)}"
            for i in images
        ]
    return [
        f"SELECT {ev} AS ev FROM {i}_rows {i} JOIN {table} r ON r.{pk} = "
        f"{i}.{d.quote(fk)}"
        for i in images
    ]


def _pg_events(d: Dialect, src: Source, op: str) -> str:
    """Return the SELECT of `op`'s events over the statement's transition tables.

    One pass over the rows (an UPDATE joins the old and new images once),
    each row yielding every direct feed's events through a LATERAL VALUES;
    m2m feeds join their owner table apart.
    """
    pk = d.quote(src.pk)
    direct = [(layer, feed) for layer, feed, owner in src.feeds if owner is None]
    images = {"ins": ["n"], "del": ["o"], "upd": ["o", "n"]}[op]
    rows = {
        "ins": "n_rows n",
        "del": "o_rows o",
        "upd": f"o_rows o FULL JOIN n_rows n ON n.{pk} = o.{pk}",
    }[op]
    joins, joined = _pg_via_joins(d, src, [feed for _, feed in direct], images)
    rows += joins
    values = [
        f"({_pg_value(d, src, layer, feed, op, image, joined)})"
        for layer, feed in direct
        for image in images
    ]
    selects = (
        [
            f"SELECT v.ev FROM {rows} CROSS JOIN LATERAL (VALUES {', '.join(values)}) "
            "AS v(ev) WHERE v.ev IS NOT NULL"
        ]
        if values
        else []
    )
    for layer, feed, owner in src.feeds:
        if owner is not None:
            selects += _m2m_rows(d, src, layer, feed, owner, op, "o", "n")
    return " UNION ALL ".join(selects)


def _pg_via_joins(
    d: Dialect, src: Source, feeds: list[Feed], images: list[str]
) -> tuple[str, Joined]:
    """Return LEFT JOINs reading every `Via` of the feeds once per row image.

    One join per (table, column) and image replaces a subquery per event,
    evaluated twice (the NULL test and the event): a 10,000-row UPDATE of
    personas reads each row's server once, by a hash join.
    """
    joins: list[str] = []
    joined: Joined = {}
    aliases: dict[tuple[str, str, str], str] = {}
    for feed in feeds:
        model = apps.get_model(feed.model)
        for via in feed.vias:
            target = apps.get_model(via.model)
            for image in images:
                where = (target._meta.db_table, _column(model, via.column), image)
                alias = aliases.get(where)
                if alias is None:
                    alias = aliases[where] = f"v{len(aliases)}"
                    joins.append(
                        f" LEFT JOIN {d.quote(where[0])} {alias} ON "
                        f"{alias}.{d.quote(target._meta.pk.column)} = "
                        f"{image}.{d.quote(where[1])}"
                    )
                column = d.quote(_column(target, via.attname))
                joined[(via, image)] = f"{alias}.{column}"
    return "".join(joins), joined


def _pg_value(
    d: Dialect,
    src: Source,
    layer: Layer,
    feed: Feed,
    op: str,
    image: str,
    joined: Joined,
) -> str:
    """Return the event of `image` of one row, NULL when this feed ignores the row."""
    event = event_sql(d, layer, feed, image, joined)
    if op != "upd":
        return event
    other, pk = ("n" if image == "o" else "o"), d.quote(src.pk)
    # The old image's event differs from the new one's only when a key
    # column moved: otherwise it is the same event, built for nothing.
    changed = changed_sql(d, feed, "o", "n", keys_only=image == "o")
    return (
        f"CASE WHEN {image}.{pk} IS NOT NULL AND ({other}.{pk} IS NULL OR "
        f"{changed}) THEN {event} END"
    )


PG_ORIGIN = (
    "'database:' || coalesce(nullif(current_setting('application_name', true), "
    "''), session_user::text) || ':' || pg_backend_pid()"
)


def postgres_statements(src: Source) -> list[str]:
    """Return the SQL that (re)creates the PostgreSQL triggers of one table."""
    d = Dialect()
    table = d.quote(src.table)
    out = []
    for op, verb in OPS.items():
        name = f"{PREFIX}{src.table}_{op}"
        union = _pg_events(d, src, op)
        body = _pg_insert(
            f"SELECT ev, (row_number() OVER () - 1) / {CHUNK} AS chunk FROM ("
            f"SELECT DISTINCT ev FROM ({union}) AS e) AS d",
            group="chunk",
        )
        refs = {
            "ins": "NEW TABLE AS n_rows",
            "del": "OLD TABLE AS o_rows",
            "upd": "OLD TABLE AS o_rows NEW TABLE AS n_rows",
        }[op]
        out += _pg_trigger(name, table, verb, f"REFERENCING {refs}", body)
    everything = " UNION ".join(
        f"SELECT jsonb_build_array({d.literal(layer.name)}, 'all', "
        "jsonb_build_array()) AS ev"
        for layer in {layer.name: layer for layer, _, _ in src.feeds}.values()
    )
    body = _pg_insert(everything)
    out += _pg_trigger(f"{PREFIX}{src.table}_trn", table, "TRUNCATE", "", body)
    return out


def _pg_insert(events: str, *, group: str | None = None) -> str:
    """Return the INSERT storing the `ev` column of `events` as outbox rows."""
    grouped = f" GROUP BY {group}" if group else ""
    return (
        f"INSERT INTO {OUTBOX} (created_at, origin, events, tx) "
        f"SELECT now(), {PG_ORIGIN}, jsonb_agg(ev), txid_current() "
        f"FROM ({events}) AS c{grouped}"
    )


def _pg_trigger(name: str, table: str, verb: str, refs: str, body: str) -> list[str]:
    return [
        # jit off: the transition tables' fixed estimates make the planner
        # expect millions of rows, and compiling took longer than the work.
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql "
        f"SET {PG_FUNCTION_SETTING[0]} = {PG_FUNCTION_SETTING[1]} AS "
        f"$tomori$ BEGIN {body}; RETURN NULL; END $tomori$",
        f"DROP TRIGGER IF EXISTS {name} ON {table}",
        f"CREATE TRIGGER {name} AFTER {verb} ON {table} {refs} FOR EACH STATEMENT "
        f"EXECUTE FUNCTION {name}()",
    ]


def sqlite_statements(src: Source) -> list[str]:
    """Return the SQL that (re)creates the SQLite triggers of one table."""
    d = SqliteDialect()
    table = d.quote(src.table)
    out = []
    for op, verb in OPS.items():
        name = f"{PREFIX}{src.table}_{op}"
        union = " UNION ALL ".join(_event_rows(d, src, op, "OLD", "NEW"))
        out += [
            f"DROP TRIGGER IF EXISTS {name}",
            f"CREATE TRIGGER {name} AFTER {verb} ON {table} FOR EACH ROW BEGIN "
            f"INSERT INTO {OUTBOX} (created_at, origin, events, tx) SELECT "
            "strftime('%Y-%m-%d %H:%M:%f', 'now'), 'database', "
            f"json_group_array(json(ev)), {SQLITE_TX} FROM (SELECT DISTINCT ev FROM "
            f"({union}) WHERE ev IS NOT NULL) HAVING count(*) > 0; END",
        ]
    return out


def expected(vendor: str) -> dict[str, list[str]]:
    """Return {table: the statements that install its capture} for a backend."""
    build = postgres_statements if vendor == "postgresql" else sqlite_statements
    return {table: build(src) for table, src in sources().items()}


def supported(connection: BaseDatabaseWrapper) -> bool:
    """Return whether changes on this database can be captured by triggers."""
    return connection.vendor in ("postgresql", "sqlite")


def sync(connection: BaseDatabaseWrapper) -> list[str]:
    """Install or refresh every table's capture, drop stale ones; return the tables."""
    if not supported(connection):
        return []
    wanted = expected(connection.vendor)
    installed = _installed(connection)
    with connection.cursor() as cursor:
        for stale in sorted(set(installed) - _names(wanted)):
            _drop(connection, cursor, stale, installed[stale][0])
        for statements in wanted.values():
            for sql in statements:
                cursor.execute(sql)
    return sorted(wanted)


def _names(wanted: dict[str, list[str]]) -> set[str]:
    ops = [*OPS, "trn"]
    return {
        f"{PREFIX}{table}_{op}"
        for table in wanted
        for op in ops
        if any(f"{PREFIX}{table}_{op}" in sql for sql in wanted[table])
    }


def _installed(connection: BaseDatabaseWrapper) -> dict[str, tuple[str, str]]:
    """Return {trigger name: (table, its definition)} of the installed captures.

    On PostgreSQL the definition is the function's body and its settings
    (" SET jit=off"), so a function whose `jit = off` was reset differs.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT t.tgname, c.relname, p.prosrc || ' SET ' || "
                "coalesce(array_to_string(p.proconfig, ' SET '), '') "
                "FROM pg_trigger t "
                "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON "
                "p.oid = t.tgfoid WHERE t.tgname LIKE %s AND NOT t.tgisinternal",
                [PREFIX + "%"],
            )
        else:
            cursor.execute(
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = "
                "'trigger' AND name LIKE %s",
                [PREFIX + "%"],
            )
        return {name: (table, body) for name, table, body in cursor.fetchall()}


def _drop(connection: BaseDatabaseWrapper, cursor: Any, name: str, table: str) -> None:
    if connection.vendor == "postgresql":
        cursor.execute(f'DROP TRIGGER IF EXISTS {name} ON "{table}"')
        cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")
    else:
        cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


def differences(connection: BaseDatabaseWrapper) -> list[str]:
    """Return how the installed captures differ from the declarations (empty: none)."""
    if not supported(connection):
        return []
    installed = _installed(connection)
    problems = []
    for table, statements in expected(connection.vendor).items():
        for name, definition in _definitions(connection.vendor, statements):
            got = installed.get(name)
            if got is None:
                problems.append(f"table {table} has no trigger {name}")
            elif _squash(got[1]) != _squash(definition):
                problems.append(f"trigger {name} on {table} differs from the feeds")
    wanted = _names(expected(connection.vendor))
    problems += [
        f"trigger {name} on {installed[name][0]} captures a table no layer reads"
        for name in sorted(set(installed) - wanted)
    ]
    return problems


def _definitions(vendor: str, statements: list[str]) -> Iterator[tuple[str, str]]:
    """Yield (trigger name, the definition the catalog stores) per trigger."""
    for sql in statements:
        if vendor == "postgresql" and sql.startswith("CREATE OR REPLACE FUNCTION"):
            name = sql.split()[4].removesuffix("()")
            setting = "=".join(PG_FUNCTION_SETTING)
            yield name, f"{sql.split('$tomori$')[1]} SET {setting}"
        elif vendor != "postgresql" and sql.startswith("CREATE TRIGGER"):
            yield sql.split()[2], sql


def _squash(sql: str) -> str:
    return " ".join(sql.split())


def drop_all(connection: BaseDatabaseWrapper) -> None:
    """Drop every installed capture trigger (the migration's reverse)."""
    if not supported(connection):
        return
    installed = _installed(connection)
    with connection.cursor() as cursor:
        for name, (table, _definition) in sorted(installed.items()):
            _drop(connection, cursor, name, table)
