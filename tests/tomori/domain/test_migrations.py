"""Migrations are complete for every model and apply on PostgreSQL and SQLite."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[3] / "."


@pytest.mark.django_db
def test_no_missing_migrations() -> None:
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def _manage(*args: str, database_url: str) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
    }
    subprocess.run(
        [sys.executable, "manage.py", *args, "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )


def test_migrations_apply_and_revert_on_sqlite(tmp_path: Path) -> None:
    """The input-rule CHECKs reach a fresh SQLite database, and 0003 reverts cleanly."""
    path = tmp_path / "tomori.sqlite3"
    url = f"sqlite:///{path}"
    _manage("migrate", database_url=url)
    _manage("migrate", "tomori", "0002", database_url=url)
    _manage("migrate", database_url=url)
    with sqlite3.connect(path) as db:
        schema = " ".join(
            row[0] or "" for row in db.execute("SELECT sql FROM sqlite_master")
        )
        missing = [name for name in _check_names() if f'"{name}"' not in schema]
        assert missing == []
        with pytest.raises(sqlite3.IntegrityError):
            db.execute(
                "INSERT INTO users (user_disc_id, username, privacy_level, language,"
                " personal_memories_enabled, created_at, updated_at)"
                " VALUES (0, '', 1, 'en', 1, '2026-01-01', '2026-01-01')"
            )


def _check_names() -> list[str]:
    from django.apps import apps
    from django.db.models import CheckConstraint

    return [
        constraint.name
        for model in apps.get_app_config("tomori").get_models()
        for constraint in model._meta.constraints
        if isinstance(constraint, CheckConstraint)
    ]
