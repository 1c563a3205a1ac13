"""A real `runbot` with METRICS_PORT: scrapes move with traffic, probes follow faults."""

from __future__ import annotations

import re
import signal
import socket
import uuid

import pytest

from tests.metrics.scraping import (
    Samples,
    exported_names,
    get,
    parse,
    prometheus_exprs,
    promql_metric_names,
    total,
    value,
)
from tests.support.faults import wait_until
from tests.tomori.bot.worker.conftest import BotProcess
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.domain.models import Server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SIM = ("--simulate", "--fake-openrouter", "--traffic-rate", "200")
ENV = {"METRICS_PORT": "0", "METRICS_REFRESH_SECONDS": "1"}


def _seed() -> None:
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)  # every turn is answered


def _endpoint(bot: BotProcess) -> str:
    line = bot.wait_for("metrics at http://")
    match = re.search(r"(http://[\d.]+:\d+)/metrics", line)
    assert match, line
    return match.group(1)


def _ready(url: str, timeout: float = 60) -> None:
    assert wait_until(lambda: get(url + "/readyz")[0] == 200, timeout=timeout), get(
        url + "/readyz"
    )


def _scrape_when(url: str, predicate, timeout: float = 30) -> Samples:  # type: ignore[no-untyped-def]
    found: list[Samples] = []

    def check() -> bool:
        status, body = get(url + "/metrics")
        found[:] = [parse(body)] if status == 200 else []
        return bool(found) and predicate(found[0])

    assert wait_until(check, timeout=timeout, interval=0.2), found[:1]
    return found[0]


def test_a_running_worker_serves_metrics_that_move_with_traffic(
    run_bot: type[BotProcess],
) -> None:
    _seed()
    bot = run_bot(*SIM, env=ENV)
    url = _endpoint(bot)
    _ready(url)
    hits = "tomori_cache_hits_total"
    first = _scrape_when(url, lambda s: total(s, "tomori_turns_total") > 20)
    # One more turn may be a user-cache miss (a user seen for the first time),
    # so wait, bounded, for a scrape where the user cache has answered again.
    second = _scrape_when(
        url,
        lambda s: (
            total(s, "tomori_turns_total") > total(first, "tomori_turns_total")
            and value(s, hits, cache="user") > value(first, hits, cache="user")
        ),
    )
    for name in (
        "tomori_messages_received_total",
        "tomori_turn_duration_seconds_count",
    ):
        assert total(second, name) > total(first, name), name
    assert value(second, "tomori_discord_cache_entries", cache="guilds") == 5
    assert value(second, "tomori_gateway_connected") == 1
    assert value(second, "tomori_bus_connected") == 1
    assert value(second, "tomori_outbox_following") == 1
    assert value(second, "tomori_worker_ready") == 1
    assert value(second, "tomori_memory_limit_bytes") > 0
    assert get(url + "/healthz")[0] == 200
    bot.proc.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=20) == 0


def test_the_dashboard_queries_only_metrics_a_worker_exports(
    run_bot: type[BotProcess],
) -> None:
    _seed()
    bot = run_bot(*SIM, env=ENV)
    url = _endpoint(bot)
    _ready(url)
    _scrape_when(url, lambda s: total(s, "tomori_turns_total") > 0)
    exported = exported_names(get(url + "/metrics")[1])
    wanted = set().union(*map(promql_metric_names, prometheus_exprs()))
    assert len(wanted) > 30 and wanted - exported == set()


def test_readiness_fails_while_redis_is_down_and_comes_back_with_it(
    run_bot: type[BotProcess], own_redis
) -> None:  # type: ignore[no-untyped-def]
    _seed()
    env = {
        **ENV,
        "REDIS_URL": own_redis.url,
        "TOMORI_BUS_CHANNEL": f"tomori:test-obs:{uuid.uuid4().hex}",
        "SHARD_LOCK_TTL_SECONDS": "12",  # outlives the outage below
    }
    bot = run_bot(*SIM, env=env)
    url = _endpoint(bot)
    _ready(url)
    own_redis.kill()
    assert wait_until(lambda: get(url + "/readyz")[0] == 503, timeout=10)
    status, body = get(url + "/readyz")
    assert status == 503 and '"bus_subscribed": false' in body, body
    assert get(url + "/healthz")[0] == 200  # alive: only not ready
    own_redis.start()
    _ready(url, timeout=20)
    assert bot.proc.poll() is None


def test_a_taken_metrics_port_stops_runbot_naming_the_settings(
    run_bot: type[BotProcess],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        bot = run_bot(*SIM, "--duration", "5", env={"METRICS_PORT": str(port)})
        assert bot.wait_exit() == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}" in bot.output
    assert "METRICS_PORT" in bot.output and "Traceback" not in bot.output
