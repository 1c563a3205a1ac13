"""Two shard processes: each holds its own caches, receives every bus message, and its own commands."""

from __future__ import annotations

import uuid

import pytest

from caches import bus, live
from caches.messages import WorkerSnapshot
from caches.operations import clear_cache_command, on_worker_command, send_command
from tests.support.faults import free_port, wait_until
from tests.tomori.bot.worker.conftest import BotProcess


@pytest.mark.django_db(transaction=True)
def test_a_bus_invalidation_reaches_both_shards_and_a_command_one_alone(
    run_bot: type[BotProcess],
    redis_url: str,
    settings,  # type: ignore[no-untyped-def]
) -> None:
    channel = f"tomori:test-bus:{uuid.uuid4().hex}"
    settings.TOMORI_BUS_CHANNEL = channel
    settings.REDIS_URL = redis_url
    live.reset_for_tests()
    test_bus = bus.configure(redis_url=redis_url, channel=channel)
    env = {
        "REDIS_URL": redis_url,
        "TOMORI_BUS_CHANNEL": channel,
        "WORKER_SNAPSHOT_INTERVAL_SECONDS": "0.5",
    }
    shards = [
        run_bot(
            "--simulate",
            "--fake-openrouter",
            "--shard-ids",
            str(i),
            "--shard-count",
            "2",
            env={**env, "TOMORI_WORKER_ID": "w", "METRICS_PORT": str(free_port())},
        )
        for i in (0, 1)
    ]
    try:
        for shard in shards:
            shard.wait_for("bot ready")
        for shard in shards:
            shard.wait_for("bus subscribed")
        test_bus.broadcast([("tomori_state", "key", (424242,))])
        outcome = send_command(
            clear_cache_command("user", issued_by="test"), timeout=10
        )
        assert sorted(reply.worker_id for reply in outcome.replies) == [
            "w:shard0",
            "w:shard1",
        ]

        # Each worker applied the broadcast before it answered (one ordered
        # channel), but its snapshot is published every 0.5 s: wait for the
        # first one taken after the apply (bounded).
        def snapshots() -> dict[str, WorkerSnapshot]:
            return {snap.worker_id: snap for snap in live.live_snapshots()}

        def applied_everywhere() -> bool:
            found = snapshots()
            return set(found) == {"w:shard0", "w:shard1"} and all(
                snap.bus.get("applied", 0) >= 1 for snap in found.values()
            )

        assert wait_until(applied_everywhere, timeout=10), snapshots()
        for snap in snapshots().values():
            assert snap.shard_ids in ((0,), (1,))

        # A command for shard 1 alone: shard 0 declines it.
        one = on_worker_command(clear_cache_command("user", issued_by="t"), "w:shard1")
        outcome = send_command(one, timeout=10)
        assert [reply.worker_id for reply in outcome.replies] == ["w:shard1"]

        # Each snapshot carries the last minute's traffic and the probe's verdict.
        def measured() -> bool:
            found = snapshots().values()
            return len(found) == 2 and all(
                s.traffic is not None and s.traffic.window_seconds > 0 and s.ready
                for s in found
            )

        assert wait_until(measured, timeout=10), snapshots()
        commands = {s.worker_id: s.bus["commands_run"] for s in snapshots().values()}
        assert commands == {"w:shard0": 1, "w:shard1": 2}
    finally:
        bus.configure()
        live.reset_for_tests()
