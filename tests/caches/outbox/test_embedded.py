"""Embedded mode (SQLite, no Redis): a second process's write reaches the running worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tomori.bot.worker.conftest import ROOT, BotProcess

pytestmark = pytest.mark.e2e


def manage(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


SEED = (
    "from tomori.domain.models import Server, Persona\n"
    "s = Server.objects.create(server_disc_id=123456789012345678)\n"
    "print(Persona.objects.create(server=s, name='before', is_main=True).pk)\n"
)


def test_a_shell_save_reaches_the_worker_through_the_outbox(tmp_path: Path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'embedded.sqlite3'}",
        "REDIS_URL": "",
        "TOMORI_BUS_CHANNEL": f"tomori:embedded:{tmp_path.name}",
    }
    manage("migrate", "--noinput", env=env)
    persona_id = int(manage("shell", "--no-imports", "-c", SEED, env=env).split()[-1])
    bot = BotProcess("--simulate", env={**env, "PYTHONUNBUFFERED": "1"})
    try:
        bot.wait_for("is up", timeout=90)
        manage(
            "shell",
            "--no-imports",
            "-c",
            "from tomori.domain.models import Persona\n"
            f"p = Persona.objects.get(pk={persona_id}); p.name = 'after'; p.save()\n",
            env=env,
        )
        line = bot.wait_for("the bus had not delivered", timeout=30)
    finally:
        bot.stop()
    assert "applied 1 write(s)" in line


def test_an_outside_write_by_the_sqlite3_cli_reaches_the_worker(tmp_path: Path):
    """SQLite's row-level capture triggers: a client with no Django in it."""
    database = tmp_path / "embedded.sqlite3"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": "",
        "TOMORI_BUS_CHANNEL": f"tomori:embedded:{tmp_path.name}",
    }
    manage("migrate", "--noinput", env=env)
    manage("shell", "--no-imports", "-c", SEED, env=env)
    bot = BotProcess("--simulate", env={**env, "PYTHONUNBUFFERED": "1"})
    try:
        bot.wait_for("is up", timeout=90)
        subprocess.run(  # Python's own sqlite3 module, in a process of its own
            [
                sys.executable,
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                "c.execute(\"UPDATE personas SET name = 'by sqlite3'\"); c.commit()",
                str(database),
            ],
            check=True,
            timeout=30,
        )
        line = bot.wait_for("invalidated from database", timeout=30)
    finally:
        bot.stop()
    assert "Tomori state of server 123456789012345678" in line


def test_sqlite_records_both_keys_of_a_moved_row_and_one_of_a_renamed_row(
    tmp_path: Path,
):
    """The row-level triggers' events, read back from the outbox with sqlite3."""
    import json
    import sqlite3

    database = tmp_path / "embedded.sqlite3"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": f"sqlite:///{database}",
        "REDIS_URL": "",
    }
    manage("migrate", "--noinput", env=env)
    client = sqlite3.connect(database)

    def events_of(sql: str) -> set[tuple[str, str, tuple[int, ...]]]:
        high = client.execute(
            "SELECT coalesce(max(id), 0) FROM caches_invalidation_outbox"
        ).fetchone()[0]
        client.execute(sql)
        client.commit()
        rows = client.execute(
            "SELECT events FROM caches_invalidation_outbox WHERE id > ?", [high]
        ).fetchall()
        return {
            (name, op, tuple(args))
            for (text,) in rows
            for name, op, args in json.loads(text)
        }

    persona = manage(
        "shell",
        "--no-imports",
        "-c",
        "from tomori.domain.models import Persona, Server\n"
        "first = Server.objects.create(server_disc_id=111)\n"
        "Server.objects.create(server_disc_id=222)\n"
        "print(Persona.objects.create(server=first, name='a').pk)\n",
        env=env,
    ).split()[-1]
    second = client.execute("SELECT id FROM servers WHERE server_disc_id = 222")

    renamed = events_of(f"UPDATE personas SET name = 'b' WHERE id = {persona}")
    assert ("tomori_state", "key", (111,)) in renamed
    assert not any(222 in args for _, _, args in renamed)

    moved = events_of(
        f"UPDATE personas SET server_id = {second.fetchone()[0]} WHERE id = {persona}"
    )
    assert {("tomori_state", "key", (111,)), ("tomori_state", "key", (222,))} <= moved
