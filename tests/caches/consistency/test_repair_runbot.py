"""A running worker repairs what a second PostgreSQL client changed behind its back, once per key."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter

import pytest

from caches.core import finite_json
from tests.caches.consistency.conftest import start_watched_bot
from tests.support.outside import outside_client
from tests.tomori.bot.worker.conftest import BotProcess
from tomori.domain.models import Persona

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("postgres"),
    pytest.mark.e2e,
]

SUFFIX = "#outside"
REPAIRED = re.compile(r"consistency: tomori_state\[(\d+)\] differs .*dropped it")
#: Seconds of output watched after the first repair for a key logged twice.
WATCH_SECONDS = 10


def _rename_from_outside() -> int:
    """Rename every main persona from a second client, unrecorded; return how many."""
    with outside_client() as outside, outside.transaction():
        # No trigger fires in this session: the recording of changes is off.
        outside.execute("SET LOCAL session_replication_role = replica")
        cursor = outside.execute(
            f"UPDATE {Persona._meta.db_table} SET name = name || %s WHERE is_main",
            [SUFFIX],
        )
        return cursor.rowcount


def _checked(cache: str) -> int:
    from caches.live import live_snapshots

    return sum(s.consistency.get(cache, {}).get("checked", 0) for s in live_snapshots())


def _served_renamed() -> bool:
    from caches.live import live_snapshots

    turns = [t for snap in live_snapshots() for t in snap.recent_turns]
    return any(SUFFIX in (t.get("persona") or "") for t in turns)


def test_a_running_worker_repairs_an_outside_write_once_per_key(
    run_bot: type[BotProcess],
) -> None:
    bot = start_watched_bot(run_bot)
    for _ in range(60):  # one cache_sizes line a second: the clock
        _next_second(bot)
        if _checked("tomori_state") >= 10:
            break
    assert _rename_from_outside() > 0
    committed = time.monotonic()
    output: list[str] = []
    repaired_at = None
    for _ in range(60):
        output += _next_second(bot)
        if repaired_at is None and any(REPAIRED.search(line) for line in output):
            repaired_at = time.monotonic() - committed
        if repaired_at is not None and _served_renamed():
            break
    assert repaired_at is not None, "".join(output)
    assert _served_renamed()  # the next read reloaded the outside write
    for _ in range(WATCH_SECONDS):  # a key left inconsistent would be logged again
        output += _next_second(bot)
    bot.proc.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=30) == 0
    output += bot.lines
    line = next(line for line in output if "consistency checks:" in line)
    summary = finite_json.loads(line.split("consistency checks: ", 1)[1])
    logged = Counter(m[1] for line in output if (m := REPAIRED.search(line)))
    lines = "".join(line for line in output if "consistency" in line)
    assert logged and max(logged.values()) == 1, lines  # once per key
    state = summary["tomori_state"]
    assert state["inconsistent"] == state["repairs"] == len(logged), lines
    print(f"first repair {repaired_at:.1f} s after the commit; {len(logged)} key(s)")


def _next_second(bot: BotProcess) -> list[str]:
    """Wait for the next cache_sizes line (one a second); return and forget the output."""
    bot.wait_for('"metric":"cache_sizes"', timeout=30)
    lines = list(bot.lines)
    bot.lines.clear()
    return lines
