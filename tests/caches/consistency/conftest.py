"""Fixtures of the consistency tests: runbot processes."""

from tests.tomori.bot.worker.conftest import run_bot  # noqa: F401


def start_watched_bot(bot_process):  # type: ignore[no-untyped-def]
    """Seed the small world and start a simulated worker checking 50 keys a second.

    One `cache_sizes` line a second (the tests' clock); whitelists are off
    so every guild's turns read its Tomori state.
    """
    from tomori.bot.demo import seed_world
    from tomori.bot.simulator import Scenario, generate_world
    from tomori.domain.models import Server

    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)
    bot = bot_process(
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
    return bot
