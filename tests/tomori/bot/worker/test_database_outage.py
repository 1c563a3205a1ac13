"""A real worker through a database outage: it keeps answering, its log stays small."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.support.faults import TcpProxy, proxied_url
from tests.tomori.bot.worker.conftest import BotProcess
from tests.tomori.bot.worker.conftest import test_database_url as database_url
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world

#: Seconds of outage, counted in the worker's own one-second metric lines.
OUTAGE_SECONDS = 6
#: The bound: log lines per second, averaged over the outage.
MAX_LINES_PER_SECOND = 20.0


def next_line(bot: BotProcess, text: str, *, into: list[str]) -> str:
    """Wait for the next line containing `text`; move every line read into `into`."""
    bot.lines.clear()
    line = bot.wait_for(text, timeout=30)
    into.extend(bot.lines)
    return line


def logged_at(line: str) -> datetime:
    """Return the time a log line was written (its asctime prefix)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@pytest.mark.django_db(transaction=True)
def test_a_database_outage_at_default_traffic_logs_at_most_20_lines_a_second(
    run_bot: type[BotProcess], pg_proxy: TcpProxy
) -> None:
    seed_world(generate_world(Scenario.named("small")))
    env = {
        "DATABASE_URL": proxied_url(database_url(), pg_proxy),
        "CACHE_METRICS_INTERVAL_MS": "1000",  # a line a second: the outage's clock
    }
    bot = run_bot("--simulate", "--fake-openrouter", env=env)  # default traffic
    bot.wait_for("bot ready")
    bot.wait_for('"metric":"cache_sizes"', timeout=30)

    pg_proxy.refuse()
    before: list[str] = []
    start = next_line(bot, "database outage started", into=before)
    during = [start]
    for _ in range(OUTAGE_SECONDS):
        next_line(bot, '"metric":"cache_sizes"', into=during)
    pg_proxy.forward()
    end = next_line(bot, "database outage ended", into=during)

    window = (logged_at(end) - logged_at(start)).total_seconds()
    assert window >= OUTAGE_SECONDS - 1, bot.output[-3000:]
    rate = len(during) / window
    print(f"outage of {window:.1f} s: {len(during)} lines, {rate:.1f} a second")
    assert rate <= MAX_LINES_PER_SECOND, "".join(during)
    assert "pipeline: message" not in "".join(during)  # an outage is no error
    assert int(end.split(": ")[2].split()[0]) > 0  # "... ended after N s: M failures"
