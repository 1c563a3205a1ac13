"""runbot warms its guilds' per-server entries before logging in, or starts cold in one line."""

from __future__ import annotations

import pytest

from tests.support.faults import TcpProxy, proxied_url
from tests.tomori.bot.worker.conftest import BotProcess
from tests.tomori.bot.worker.conftest import test_database_url as database_url_of_tests
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world

SIM = ("--simulate", "--fake-openrouter")


@pytest.mark.django_db(transaction=True)
def test_the_guilds_are_warmed_before_the_gateway(run_bot: type[BotProcess]) -> None:
    seed_world(generate_world(Scenario.named("small")))
    bot = run_bot(*SIM)
    warmed = bot.wait_for("guild caches:")
    assert "warmed" in warmed and "for 5 guilds" in warmed and "of 10 layers" in warmed
    assert "stopped" not in warmed
    bot.wait_for("bot ready")
    lines = "\n".join(bot.lines)
    assert lines.index("guild caches:") < lines.index("bot ready")


@pytest.mark.django_db(transaction=True)
def test_a_frozen_database_leaves_the_worker_to_start_cold_in_time(
    pg_proxy: TcpProxy, run_bot: type[BotProcess]
) -> None:
    seed_world(generate_world(Scenario.named("small")))
    url = proxied_url(database_url_of_tests(), pg_proxy)
    pg_proxy.freeze()  # connections open, nothing answers
    bot = run_bot(
        *SIM,
        env={
            "DATABASE_URL": url,
            "DB_CALL_TIMEOUT_SECONDS": "30",  # the warm-up's own deadline ends it
            "WORKER_WARM_TIMEOUT_SECONDS": "1",
        },
    )
    line = bot.wait_for("guild caches:", timeout=90)
    assert "not warmed (WORKER_WARM_TIMEOUT_SECONDS=1 passed)" in line
    assert "the worker starts cold" in line
    pg_proxy.forward()
    bot.wait_for("bot ready", timeout=90)
