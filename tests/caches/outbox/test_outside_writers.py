"""Writes made outside Django reach a running `runbot --simulate` worker on PostgreSQL within the bound.

Every write is made by a real second client with no Django in it: the
`psql` binary (or, to kill it right after its COMMIT, a psycopg connection
in a subprocess), each with an `application_name` of its own, so the
worker's line "invalidated from database:<application_name>:<pid>: ..."
proves which write it applied. One worker serves the whole module; each
case waits, bounded by a deadline, for its line and reports the time from
the writer's COMMIT returning to the worker applying it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from conftest import require_service
from tests.support.processes import run_python
from tests.tomori.bot.worker.conftest import BotProcess
from tests.tomori.bot.worker.conftest import test_database_url as database_url
from tomori.domain.knobs import knobs

pytestmark = pytest.mark.e2e

#: Discord ids of the servers the cases write to, one per case.
BASE = 910_000_000_000_000_000
CASES = (
    "autocommit",
    "transaction",
    "rename_back",
    "insert",
    "delete",
    "copy",
    "rollback",
    "migration",
    "killed",
)
DISC = {case: BASE + i for i, case in enumerate(CASES, start=1)}
#: The 10,000 servers (one persona each) of the bulk UPDATE.
BULK = 10_000
BULK_BASE = BASE + 1_000_000
PERSONA = (
    "INSERT INTO personas (name, is_main, position, system_prompt, avatar_url, "
    "tools_enabled, created_at, updated_at, server_id) "
)
SEED = (
    f"""INSERT INTO servers (server_disc_id, name, tool_use_enabled, emoji_usage_enabled,
    sticker_usage_enabled, channel_whitelist_enabled, created_at, updated_at)
SELECT d, 'writers', false, false, false, false, now(), now()
FROM (SELECT unnest(%s::bigint[]) AS d
      UNION ALL SELECT {BULK_BASE} + g FROM generate_series(1, {BULK}) g) AS ids""",
    f"""{PERSONA} SELECT 'A', true, 0, '', '', false, now(), now(), id FROM servers
WHERE server_disc_id >= {BASE} AND server_disc_id <= {BULK_BASE + BULK}""",
)


class TimedBot(BotProcess):
    """A runbot process that notes when each output line arrived (monotonic)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.arrived: dict[str, float] = {}
        super().__init__(*args, env=env)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.arrived.setdefault(line, time.monotonic())
            self._queue.put(line)
        self._queue.put(None)


@dataclass
class Outside:
    """The running worker, the database's address and the measured times."""

    bot: TimedBot
    db: dict[str, Any]
    url: str
    bound: float
    times: dict[str, float] = field(default_factory=dict)

    def client(self, app: str, **kwargs: Any) -> psycopg.Connection[Any]:
        """Open a psycopg connection of the test database named `app`."""
        return psycopg.connect(
            host=self.db["HOST"] or "127.0.0.1",
            port=self.db["PORT"] or 5432,
            user=self.db["USER"] or "postgres",
            dbname=self.db["NAME"],
            application_name=app,
            **kwargs,
        )

    def psql(self, app: str, script: str) -> float:
        """Run `script` in the psql binary as `app`; return when its COMMIT had returned.

        psql then asks the server's clock (same host), so the time is taken
        one round trip after the COMMIT returned, as a monotonic reading.
        """
        done = subprocess.run(
            ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-f", "-"],
            input=script + "\nSELECT extract(epoch FROM clock_timestamp());\n",
            env={**os.environ, **self._libpq_env(app)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return float(done.stdout.split()[-1]) - (time.time() - time.monotonic())

    def _libpq_env(self, app: str) -> dict[str, str]:
        return {
            "PGHOST": self.db["HOST"] or "127.0.0.1",
            "PGPORT": str(self.db["PORT"] or 5432),
            "PGUSER": self.db["USER"] or "postgres",
            "PGDATABASE": self.db["NAME"],
            "PGAPPNAME": app,
        }

    def applied(self, app: str, phrase: str, *, since: float) -> str:
        """Wait for the worker's line applying `phrase` from `app`; record the time."""
        origin = f"invalidated from database:{app}:"
        deadline = since + self.bound + 10  # fail late enough to report the time
        while True:
            line = self.bot.wait_for(
                origin, timeout=max(deadline - time.monotonic(), 0)
            )
            if phrase in line:
                self.times[app] = self.bot.arrived[line] - since
                return line
            self.bot.lines.remove(line)  # another row of the same write

    def delivered(self, app: str, case: str, *, since: float) -> None:
        """Wait for `app`'s write to `case`'s server to be applied; assert the bound."""
        self.applied(app, _state(case), since=since)
        self.assert_in_bound(app)

    def assert_in_bound(self, app: str) -> None:
        assert self.times[app] <= self.bound, (
            f"{app}: applied {self.times[app]:.3f} s after the commit "
            f"(bound {self.bound} s)"
        )


@pytest.fixture(scope="module")
def outside(django_db_setup, django_db_blocker) -> Iterator[Outside]:  # type: ignore[no-untyped-def]
    """Seed the servers by SQL, start one worker on the test database; clean up after."""
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            require_service("PostgreSQL", f"DATABASE_URL points at {connection.vendor}")
        db, url = dict(connection.settings_dict), database_url()
    env = {
        "REDIS_URL": settings.REDIS_URL,
        "TOMORI_BUS_CHANNEL": f"tomori:writers:{uuid.uuid4().hex}",
    }
    bound = knobs().INVALIDATION_STALENESS_BOUND_SECONDS
    state = Outside(TimedBot("--simulate", env=env), db, url, bound)
    try:
        with state.client("writers-seed", autocommit=True) as seed:
            seed.execute(SEED[0], [list(DISC.values())])  # type: ignore[arg-type]
            seed.execute(SEED[1])  # type: ignore[arg-type]
        state.bot.wait_for("bot ready", timeout=90)
        yield state
    finally:
        state.bot.stop()
        _clean(state)
        for app, seconds in sorted(state.times.items(), key=lambda t: t[1]):
            print(f"{app}: applied {seconds * 1000:.0f} ms after the commit")


def _clean(state: Outside) -> None:
    with state.client("writers-clean", autocommit=True) as clean:
        clean.execute(
            "DELETE FROM personas WHERE server_id IN (SELECT id FROM servers "
            f"WHERE server_disc_id >= {BASE})"
        )
        clean.execute(f"DELETE FROM servers WHERE server_disc_id >= {BASE}")
        clean.execute(
            "DELETE FROM caches_invalidation_outbox WHERE origin LIKE 'database:writers-%'"
        )


def _persona_of(case: str) -> str:
    return f"server_id = (SELECT id FROM servers WHERE server_disc_id = {DISC[case]})"


def _state(case: str) -> str:
    return f"Tomori state of server {DISC[case]}"


def test_an_autocommit_update(outside: Outside) -> None:
    since = outside.psql(
        "writers-autocommit",
        f"UPDATE personas SET name = 'autocommit' WHERE {_persona_of('autocommit')};",
    )
    outside.delivered("writers-autocommit", "autocommit", since=since)


def test_an_update_inside_a_transaction_with_other_statements(outside: Outside) -> None:
    since = outside.psql(
        "writers-transaction",
        "BEGIN;\nSELECT count(*) FROM servers;\n"
        f"UPDATE personas SET name = 'in a transaction' WHERE {_persona_of('transaction')};\n"
        f"UPDATE servers SET name = 'touched' WHERE server_disc_id = {DISC['transaction']};\n"
        "SELECT pg_sleep(0);\nCOMMIT;\n",
    )
    outside.delivered("writers-transaction", "transaction", since=since)


def test_a_rename_and_a_rename_back_in_one_transaction(outside: Outside) -> None:
    where = _persona_of("rename_back")
    since = outside.psql(
        "writers-rename-back",
        f"BEGIN;\nUPDATE personas SET name = 'B' WHERE {where};\n"
        f"UPDATE personas SET name = 'A' WHERE {where};\nCOMMIT;\n",
    )
    outside.delivered("writers-rename-back", "rename_back", since=since)


def test_an_insert_then_a_delete(outside: Outside) -> None:
    since = outside.psql(
        "writers-insert",
        f"{PERSONA} SELECT 'inserted', false, 1, '', '', false, now(), now(), id "
        f"FROM servers WHERE server_disc_id = {DISC['insert']};",
    )
    outside.delivered("writers-insert", "insert", since=since)
    since = outside.psql(
        "writers-delete",
        "DELETE FROM personas WHERE name = 'inserted' AND server_id = (SELECT id "
        f"FROM servers WHERE server_disc_id = {DISC['insert']});",
    )
    outside.delivered("writers-delete", "insert", since=since)


def test_a_copy(outside: Outside) -> None:
    with outside.client("writers-lookup") as lookup:
        row = lookup.execute(
            "SELECT id FROM servers WHERE server_disc_id = %s", [DISC["copy"]]
        ).fetchone()
    assert row is not None
    columns = "name, is_main, position, system_prompt, avatar_url, tools_enabled, "
    since = outside.psql(
        "writers-copy",
        f"COPY personas ({columns}created_at, updated_at, server_id) FROM STDIN;\n"
        f"copied\tf\t2\t\t\tf\t2026-01-01 00:00:00+00\t2026-01-01 00:00:00+00\t{row[0]}\n"
        "\\.\n",
    )
    outside.delivered("writers-copy", "copy", since=since)


def test_a_rolled_back_transaction_delivers_nothing(outside: Outside) -> None:
    where = _persona_of("rollback")
    since = outside.psql(
        "writers-rollback",
        f"BEGIN;\nUPDATE personas SET name = 'never' WHERE {where};\nROLLBACK;\n"
        # The same session then commits a marker under another name: the
        # worker applies rows in order, so once the marker is in, anything
        # the rollback had recorded would have been applied before it.
        "SET application_name = 'writers-rollback-marker';\n"
        f"UPDATE personas SET name = 'marker' WHERE {where};\n",
    )
    outside.applied("writers-rollback-marker", _state("rollback"), since=since)
    assert not [
        line
        for line in outside.bot.lines
        if "invalidated from database:writers-rollback:" in line
    ]


def test_a_bulk_update_of_10000_rows(outside: Outside) -> None:
    app = "writers-bulk"
    since = outside.psql(
        app,
        f"UPDATE personas SET name = 'bulk' WHERE server_id IN (SELECT id FROM "
        f"servers WHERE server_disc_id > {BULK_BASE});",
    )
    with outside.client("writers-lookup") as lookup:
        row = lookup.execute(
            "SELECT count(*), max(jsonb_array_length(events)) FROM "
            "caches_invalidation_outbox WHERE origin LIKE %s",
            [f"database:{app}:%"],
        ).fetchone()
    assert row is not None
    rows, widest = row
    assert rows >= BULK // 100 and widest <= 100  # bounded batches
    lines, applied = 0, 0
    while applied < rows:  # a line per poll, saying how many rows: wait for all
        line = outside.applied(app, "", since=since)
        outside.bot.lines.remove(line)
        counted = re.search(r"\((\d+) outbox rows\)", line)
        lines, applied = lines + 1, applied + (int(counted[1]) if counted else 1)
    print(f"bulk: {rows} outbox rows of at most {widest} events, {lines} log line(s)")
    assert applied == rows and lines < rows  # not a line per row
    outside.assert_in_bound(app)


def _writer(
    code: str, *args: str, env: dict[str, str] | None = None, returncode: int = 0
) -> float:
    """Run a writer in a Python process of its own; return the time it printed last.

    The writer prints `time.monotonic()` (CLOCK_MONOTONIC, host-wide) right
    after its COMMIT returned.
    """
    out = run_python("-c", code, *args, env=env, returncode=returncode, timeout=60)
    return float(out.split()[-1])


MIGRATION = """
import time
import django
django.setup()
from django.db import connection, migrations
sql = "UPDATE personas SET name = 'by a migration' WHERE {where}"
with connection.schema_editor() as editor:
    migrations.RunSQL(sql).database_forwards("tomori", editor, None, None)
print(time.monotonic())  # the schema editor committed: CLOCK_MONOTONIC, host-wide
"""


def test_a_migrations_run_sql(outside: Outside) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": outside.url,
        "PGAPPNAME": "writers-migration",  # libpq reads it: Django sets none
    }
    since = _writer(MIGRATION.format(where=_persona_of("migration")), env=env)
    outside.delivered("writers-migration", "migration", since=since)


KILLED = """
import os, signal, sys, time
import psycopg
with psycopg.connect(sys.argv[1], application_name="writers-killed") as client:
    client.execute("UPDATE personas SET name = 'killed' WHERE {where}")
    client.commit()
    print(time.monotonic(), flush=True)  # CLOCK_MONOTONIC, host-wide
    os.kill(os.getpid(), signal.SIGKILL)  # right after COMMIT returned
"""


def test_a_writer_killed_right_after_its_commit(outside: Outside) -> None:
    db = outside.db
    dsn = (
        f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} "
        f"user={db['USER'] or 'postgres'} dbname={db['NAME']}"
    )
    since = _writer(
        KILLED.format(where=_persona_of("killed")), dsn, returncode=-signal.SIGKILL
    )
    outside.delivered("writers-killed", "killed", since=since)
