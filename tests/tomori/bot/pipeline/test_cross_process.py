"""A save made in another process reaches the next turn, over the Redis bus."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection

from caches import bus
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome
from tomori.domain import models as m

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[4]
BUS_TIMEOUT = 10.0


@pytest.fixture
def redis_bus(redis_url: str, postgres: None) -> Iterator[bus.Bus]:
    """Subscribe this process to a fresh Redis channel (as a bot worker does).

    Another process must share the database and Redis: in CI a missing
    service fails the test rather than skipping it.
    """
    channel = f"tomori:test:bot:{uuid.uuid4().hex}"
    here = bus.configure(redis_url=redis_url, channel=channel)
    yield here
    bus.configure(redis_url="", channel="tomori:test:bot")


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def rename_in_another_process(persona_id: int, name: str, channel: str) -> None:
    """Run `manage.py shell` against the test database and rename a persona."""
    code = (
        "from tomori.domain.repositories.servers import persona_update; "
        f"persona_update(persona_id={persona_id}, name={name!r})"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "TOMORI_BUS_CHANNEL": channel,
    }
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )


@sync_to_async
def main_persona_id(guild_id: int) -> int:
    return m.Persona.objects.get(server__server_disc_id=guild_id, is_main=True).pk


async def wait_for_bus(here: bus.Bus, predicate: object) -> None:
    loop = asyncio.get_running_loop()
    ok = await loop.run_in_executor(None, here.stats.wait_for, predicate, BUS_TIMEOUT)
    assert ok, here.snapshot()


async def test_rename_in_another_process_shows_in_the_next_turn(
    bot: Bot, redis_bus: bus.Bus
) -> None:
    redis_bus.start_subscriber(loop=asyncio.get_running_loop())
    await wait_for_bus(redis_bus, lambda s: s["flushes"] >= 1)
    guild = busiest_guild(bot.sim.world)
    user = await allowed_member(bot.sim.world, guild)
    channel = text_channel(bot.sim.world, guild)
    before = await bot.speak(guild, user, channel)
    applied = redis_bus.stats.snapshot()["applied"]

    await asyncio.to_thread(
        rename_in_another_process,
        await main_persona_id(guild),
        "Tomori Prime",
        redis_bus.channel,
    )
    await wait_for_bus(redis_bus, lambda s: s["applied"] > applied)
    after = await bot.speak(guild, user, channel)

    assert before.outcome is after.outcome is Outcome.OK
    assert before.main_persona == "Tomori"
    assert after.main_persona == "Tomori Prime"
    assert "Tomori Prime" in after.persona_names
