"""A database check on a database not migrated yet says it was skipped, in one line."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.support.processes import run_python


def _check_output(database_url: str) -> list[str]:
    """Run `manage.py check --database default` as before a first migrate."""
    env = {
        "PATH": "/usr/bin:/bin",
        "TOMORI_ENV_FILE": "/dev/null",
        "DJANGO_SETTINGS_MODULE": "tomori.settings",
        "DEBUG": "true",
        "REDIS_URL": "",
        "DATABASE_URL": database_url,
    }
    output = run_python(
        "manage.py", "check", "--database", "default", env=env, with_stderr=True
    )
    return output.splitlines()


@pytest.fixture
def empty_postgres_database(postgres: None) -> Iterator[str]:
    """Create an empty database beside the test one; return its URL; drop it after."""
    params = connection.settings_dict
    server = {
        "host": params["HOST"] or "127.0.0.1",
        "port": params["PORT"] or 5432,
        "user": params["USER"] or "postgres",
    }
    name = f"tomori_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{server['user']}@{server['host']}:{server['port']}/{name}"
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _assert_one_line_without_sql(lines: list[str], missing: str) -> None:
    skipped = [line for line in lines if "check caches.W010 skipped: " in line]
    assert len(skipped) == 1, lines
    assert skipped[0].endswith(missing), skipped
    assert [x for x in lines if "LINE 1" in x or "SELECT" in x or "^" in x] == []


def test_on_postgresql(empty_postgres_database: str) -> None:
    lines = _check_output(empty_postgres_database)
    _assert_one_line_without_sql(lines, 'relation "managed_webhooks" does not exist')


def test_on_sqlite(tmp_path: Path) -> None:
    lines = _check_output(f"sqlite:///{tmp_path / 'empty.sqlite3'}")
    _assert_one_line_without_sql(lines, "no such table: managed_webhooks")
