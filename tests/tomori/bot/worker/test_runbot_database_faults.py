"""runbot with its database behind a proxy we freeze: bounded SIGTERM, nothing lost after recovery."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from tests.support.faults import TcpProxy, proxied_url
from tests.tomori.bot.worker.conftest import BotProcess
from tests.tomori.bot.worker.conftest import test_database_url as database_url_of_tests
from tomori.bot.demo import seed_world
from tomori.bot.durable_flush import SHUTDOWN_MARGIN_SECONDS
from tomori.bot.simulator import Scenario, generate_world
from tomori.domain.models import Server, ShortTermMemoryRecord

SIM = ("--simulate", "--fake-openrouter", "--traffic-rate", "200")
ENV = {
    "CACHE_METRICS_INTERVAL_MS": "1000",
    "DB_CALL_TIMEOUT_SECONDS": "1",
    "DB_BREAKER_OPEN_SECONDS": "0.5",
    "SHORT_TERM_MEMORY_RETRY_MAX_SECONDS": "0.5",
    "WORKER_SHUTDOWN_TIMEOUT_SECONDS": "4",
}
HUNG = "a call has had no answer"


def _bot_through(
    proxy: TcpProxy, run_bot: type[BotProcess], *, memory: int = 1
) -> BotProcess:
    """Start runbot on the seeded world with its database behind `proxy`.

    Returns once short-term memory holds at least `memory` entries.
    """
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)  # every turn is answered
    url = proxied_url(database_url_of_tests(), proxy)
    bot = run_bot(*SIM, env={**ENV, "DATABASE_URL": url})
    bot.wait_for("bot ready")
    for _ in range(120):  # each cache_sizes line comes a second after the last
        sample = json.loads(
            bot.wait_for('"metric":"cache_sizes"', timeout=30).split(": ", 1)[1]
        )
        bot.lines.clear()
        if sample["short_term_memory"] >= memory:
            return bot
    raise AssertionError(f"short-term memory held under {memory} for 120 samples")


@pytest.mark.django_db(transaction=True)
def test_sigterm_with_the_database_frozen_exits_in_time_counting_what_is_lost(
    pg_proxy: TcpProxy, run_bot: type[BotProcess]
) -> None:
    # Once frozen, only a turn whose every read hits stores anything (a miss
    # waits on the database), short-term memory's two keys included: with
    # many entries resident, repeat (user, channel) turns soon do.
    bot = _bot_through(pg_proxy, run_bot, memory=120)
    pg_proxy.freeze()
    bot.wait_for(HUNG, timeout=30)
    # Writes are waiting once a batch has failed on the frozen database (its
    # call timed out): only then is there something SIGTERM must count as lost.
    bot.wait_for("durable writes after a failed batch", timeout=60)
    signalled = time.monotonic()
    bot.lines.clear()  # from here on: the shutdown's own lines
    bot.proc.send_signal(signal.SIGTERM)
    code = bot.wait_exit(timeout=20)
    assert time.monotonic() - signalled < 20
    assert code != 0, bot.output[-3000:]
    line = bot.wait_for("not stored at shutdown")
    count = re.search(r"(\d+) durable writes \(keys\) not stored", line)
    assert count is not None and int(count.group(1)) > 0, line
    assert "turns behind" in line
    # The flush had the whole budget: no step before it (the bus's outbox
    # reader stuck in the frozen database above all) took any of it.
    took = re.search(r"did not take them within ([\d.]+) s", line)
    assert took is not None, line
    budget = float(ENV["WORKER_SHUTDOWN_TIMEOUT_SECONDS"]) - SHUTDOWN_MARGIN_SECONDS
    assert float(took.group(1)) >= budget - 0.2, line
    # One ERROR, naming what was not stored; no traceback.
    errors = [x for x in bot.lines if " ERROR " in x]
    assert errors == [line], bot.output[-3000:]
    assert "Traceback" not in bot.output, bot.output[-3000:]
    pg_proxy.forward()  # let the held query finish before the database is flushed


@pytest.mark.django_db(transaction=True)
def test_after_a_freeze_and_recovery_sigterm_leaves_the_table_equal_to_memory(
    pg_proxy: TcpProxy, run_bot: type[BotProcess]
) -> None:
    bot = _bot_through(pg_proxy, run_bot)
    pg_proxy.freeze()
    bot.wait_for(HUNG, timeout=30)
    try:
        bot.wait_for("durable writes after a failed batch", timeout=20)
        kept = True
    except AssertionError:
        # Every turn of the freeze stopped at a miss before short-term memory,
        # so no write was pending (the retry itself: tests/faults/).
        kept = False
    pg_proxy.forward()
    if kept:
        bot.wait_for("the table took the kept durable writes", timeout=30)
    bot.proc.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=20) == 0, bot.output[-3000:]
    line = bot.wait_for("every durable write is stored")
    found = re.search(r"\((\d+) keys holding (\d+) turns in memory\)", line)
    assert found is not None, line
    keys, turns = int(found.group(1)), int(found.group(2))
    stored = list(ShortTermMemoryRecord.objects.values_list("turn_count", flat=True))
    # The table is never ahead of memory for a key, so equal sums and counts
    # mean every key's stored count equals the one in memory.
    assert (len(stored), sum(stored)) == (keys, turns)
    assert keys > 0
