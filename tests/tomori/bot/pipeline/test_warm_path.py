"""A warm turn for a known (server, user, channel) runs no database query."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection

from caches.database import run_db, run_db_writes
from caches.layers.short_term_memory import flush_pending_writes
from tests.tomori.bot.pipeline.conftest import (
    Bot,
    allowed_member,
    busiest_guild,
    text_channel,
)
from tomori.bot.pipeline import Outcome


class Statements:
    """Record the SQL run on every connection it is installed on."""

    def __init__(self) -> None:
        self.sql: list[str] = []

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        self.sql.append(sql)
        return execute(sql, *args)


def _install(recorder: Statements) -> None:
    connection.execute_wrappers.append(recorder)


def _remove(recorder: Statements) -> None:
    connection.execute_wrappers.remove(recorder)


async def test_repeat_turn_runs_no_database_query(bot: Bot) -> None:
    guild = busiest_guild(bot.sim.world)
    user = await allowed_member(bot.sim.world, guild)
    channel = text_channel(bot.sim.world, guild)
    cold = await bot.ask(guild, user, channel)
    await flush_pending_writes()  # short-term memory's write-behind of that turn
    recorder = Statements()
    # Every thread that queries: this one, the one every cache load uses, and
    # the write-behind's own.
    threads = (run_db, run_db_writes, _on_this_thread)
    for on_thread in threads:
        await on_thread(_install, recorder)
    try:
        await run_db(_probe)  # seen: the recorder watches the cache loads' thread
        probed = len(recorder.sql)
        warm = [await bot.ask(guild, user, channel) for _ in range(5)]
        warm.append(await bot.speak(guild, user, channel))  # a quiet turn too
        await flush_pending_writes()
    finally:
        for on_thread in threads:
            await on_thread(_remove, recorder)

    assert probed == 1 and recorder.sql[0] == PROBE
    statements = recorder.sql[probed:]
    assert cold.outcome is Outcome.OK
    assert all(turn.outcome is Outcome.OK for turn in warm)
    # Only short-term memory's queued write-behind of these turns may run
    # (and seeing it proves the recorder watches the write-behind's thread).
    assert any(is_memory_upsert(sql) for sql in statements)
    assert [sql for sql in statements if not is_memory_upsert(sql)] == []


PROBE = "SELECT 1"


def _probe() -> None:
    with connection.cursor() as cursor:
        cursor.execute(PROBE)


async def _on_this_thread(
    fn: Callable[[Statements], None], recorder: Statements
) -> None:
    fn(recorder)


def is_memory_upsert(sql: str) -> bool:
    return sql.lstrip().upper().startswith("INSERT") and "short_term_memory" in sql
