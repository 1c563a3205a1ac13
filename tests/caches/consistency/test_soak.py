"""A soak through the simulated Discord, with saves from another process, finds no inconsistency."""

from __future__ import annotations

import signal

import pytest

from caches.core import finite_json
from tests.tomori.bot.worker.conftest import BotProcess
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.models import Persona, Server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

MIN_SECONDS = 5
MAX_SECONDS = 60


def _checked(cache: str) -> int:
    from caches.live import live_snapshots

    return sum(
        snap.consistency.get(cache, {}).get("checked", 0) for snap in live_snapshots()
    )


def test_saves_during_traffic_leave_no_inconsistency(run_bot: type[BotProcess]) -> None:
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)
    bot = run_bot(
        "--simulate",
        "--fake-openrouter",
        "--traffic-rate",
        "200",
        env={
            "CACHE_METRICS_INTERVAL_MS": "1000",
            "CONSISTENCY_CHECKS_PER_SECOND": "50",
            "WORKER_SNAPSHOT_INTERVAL_SECONDS": "1",
        },
    )
    bot.wait_for("bot ready")
    personas = list(Persona.objects.filter(is_main=True)[:5])
    for second in range(MAX_SECONDS):  # one cache_sizes line a second: the clock
        bot.wait_for('"metric":"cache_sizes"', timeout=30)
        bot.lines.clear()
        for persona in personas:
            persona.name = f"{persona.name.split('#')[0]}#{second}"
            persona.save()
        if second >= MIN_SECONDS and _checked("tomori_state") >= 10:
            break
    bot.proc.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=30) == 0
    line = bot.wait_for("consistency checks:")
    summary = finite_json.loads(line.split("consistency checks: ", 1)[1])  # strict
    assert sum(c["checked"] for c in summary.values()) > 0, summary
    assert summary["tomori_state"]["checked"] > 0, summary
    assert all(c["inconsistent"] == 0 for c in summary.values()), summary
    assert all(c["repairs"] == 0 for c in summary.values()), summary
