"""A soak through the simulated Discord, with saves from another process, finds no inconsistency."""

from __future__ import annotations

import signal

import pytest

from caches.core import finite_json
from tests.caches.consistency.conftest import start_watched_bot
from tests.tomori.bot.worker.conftest import BotProcess
from tomori.domain.models import Persona

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]

MIN_SECONDS = 5
MAX_SECONDS = 60


def _checked(cache: str) -> int:
    from caches.live import live_snapshots

    return sum(
        snap.consistency.get(cache, {}).get("checked", 0) for snap in live_snapshots()
    )


def test_saves_during_traffic_leave_no_inconsistency(run_bot: type[BotProcess]) -> None:
    bot = start_watched_bot(run_bot)
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
