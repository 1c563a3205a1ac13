"""Benchmark invalidation lag: commit in one process, applied in another, healthy and under faults.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/invalidation_lag.py

Each scenario starts a fresh child process that plays the bot worker
(subscribed on a fresh channel of a redis-server this script starts on its
own port, following the outbox, applying on its asyncio loop) and measures
commit-to-applied lag, the time a committed change could be served stale:
- healthy: the parent commits WRITES persona saves, one transaction each;
- writer cut off from Redis: FAULT_WRITES saves from a writer whose Redis URL
  points at a closed port (only the outbox can deliver them);
- Redis paused: the same with the shared redis-server SIGSTOPped;
- writer killed after commit: KILLED_WRITERS `manage.py shell` processes that
  each commit one save and are SIGKILLed by their first on-commit hook.
Prints p50/p99/max per scenario and PASS/FAIL lines for the bars (healthy p99
under 10 ms; every fault case at most INVALIDATION_STALENESS_BOUND_SECONDS);
exits 1 if one fails. The database is created and migrated if missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tomori_bench")

WRITES = 1000
FAULT_WRITES = 100
KILLED_WRITERS = 8
P99_BAR_MS = 10.0
WAIT_SECONDS = 120.0
#: Spread fault-case commits over the outbox poll phase.
FAULT_SPACING_SECONDS = 0.013


def _setup_django() -> None:
    import django

    django.setup()


def _ensure_database() -> None:
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    db = settings.DATABASES["default"]
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
    call_command("migrate", verbosity=0)


# ---------------------------------------------------------------- subscriber


def run_subscriber(channel: str, expect: int) -> None:
    """Child: subscribe, apply on an event loop, print the lag summary as JSON."""
    _setup_django()
    from caches import bus
    from caches.core import BoundedTTLCache
    from caches.registry import EmergencyPolicy, registry

    cache: BoundedTTLCache[int, Any] = BoundedTTLCache("tomori_state", maxsize=1000)
    registry.register("tomori_state", cache, policy=EmergencyPolicy.CLEAR)
    asyncio.run(_subscribe_and_wait(bus, channel, expect))


async def _subscribe_and_wait(bus: Any, channel: str, expect: int) -> None:
    loop = asyncio.get_running_loop()
    here = bus.configure(channel=channel)
    here.start_subscriber(loop=loop, outbox=bus.outbox_options())
    await loop.run_in_executor(
        None, here.stats.wait_for, lambda s: s["flushes"] >= 1, WAIT_SECONDS
    )
    while here.snapshot()["outbox"]["applied_through"] is None:
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await loop.run_in_executor(
        None, here.stats.wait_for, lambda s: s["applied"] >= expect, WAIT_SECONDS
    )
    print(json.dumps(here.snapshot()), flush=True)
    here.close()


# ---------------------------------------------------------------- scenarios


class Scenario:
    """One measured run: a subscriber child, then the parent's writes."""

    def __init__(self, name: str, expect: int, redis_url: str) -> None:
        self.name = name
        self.channel = f"tomori:bench:{uuid.uuid4().hex}"
        env = {**os.environ, "REDIS_URL": redis_url}
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--subscriber", self.channel]
            + ["--writes", str(expect)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        assert self.child.stdout is not None
        assert self.child.stdout.readline().strip() == "ready"

    def result(self) -> dict[str, Any]:
        assert self.child.stdout is not None
        stats = json.loads(self.child.stdout.readline())
        self.child.wait(timeout=WAIT_SECONDS)
        return stats


def _save_names(persona: Any, count: int, *, spacing: float = 0.0) -> float:
    from django.db import transaction

    started = time.perf_counter()
    for n in range(count):
        with transaction.atomic():
            persona.name = f"bench-{n}"
            persona.save(update_fields=["name"])
        if spacing:
            time.sleep(spacing)
    return time.perf_counter() - started


def _killed_writer(persona_id: int, redis_url: str, channel: str) -> None:
    code = (
        "import os\n"
        "from django.db import transaction\n"
        "from tomori.domain.models import Persona\n"
        "with transaction.atomic():\n"
        "    transaction.on_commit(lambda: os.kill(os.getpid(), 9))\n"
        f"    p = Persona.objects.get(pk={persona_id})\n"
        "    p.name = 'killed'\n"
        "    p.save()\n"
    )
    env = {**os.environ, "REDIS_URL": redis_url, "TOMORI_BUS_CHANNEL": channel}
    subprocess.run(
        [sys.executable, "manage.py", "shell", "--no-imports", "-c", code],
        cwd=ROOT,
        env=env,
        timeout=60,
    )


def run_all(writes: int) -> int:
    """Parent: run every scenario and report each child's lag."""
    _setup_django()
    _ensure_database()
    from django.conf import settings

    from caches import bus
    from tests.support.faults import OwnRedis
    from tomori.domain import models as m
    from tomori.domain.knobs import (
        knobs,  # after Django is set up (and ROOT on sys.path)
    )

    bound_ms = knobs().INVALIDATION_STALENESS_BOUND_SECONDS * 1000
    server = m.Server.objects.create(server_disc_id=900_000_000 + os.getpid())
    persona = m.Persona.objects.create(server=server, name="bench", is_main=True)
    redis = OwnRedis().start()
    print(
        f"load: persona saves on PostgreSQL {settings.DATABASES['default']['NAME']}, "
        f"own redis-server on port {redis.port}, staleness bound {bound_ms:.0f} ms"
    )
    verdicts: list[bool] = []
    try:
        healthy = Scenario("healthy", writes, redis.url)
        bus.configure(redis_url=redis.url, channel=healthy.channel)
        elapsed = _save_names(persona, writes)
        verdicts.append(
            _report(healthy, writes, elapsed, bar_ms=P99_BAR_MS, key="p99_ms")
        )

        cut = Scenario("writer cut off from Redis", FAULT_WRITES, redis.url)
        bus.configure(redis_url="redis://127.0.0.1:1/0", channel=cut.channel)
        elapsed = _save_names(persona, FAULT_WRITES, spacing=FAULT_SPACING_SECONDS)
        verdicts.append(
            _report(cut, FAULT_WRITES, elapsed, bar_ms=bound_ms, key="max_ms")
        )

        paused = Scenario("Redis paused (SIGSTOP)", FAULT_WRITES, redis.url)
        bus.configure(redis_url=redis.url, channel=paused.channel)
        redis.pause()
        try:
            elapsed = _save_names(persona, FAULT_WRITES, spacing=FAULT_SPACING_SECONDS)
            stats = paused.result()
        finally:
            redis.resume()
        verdicts.append(
            _print(paused.name, stats, FAULT_WRITES, elapsed, bound_ms, "max_ms")
        )

        killed = Scenario("writer killed after commit", KILLED_WRITERS, redis.url)
        started = time.perf_counter()
        for _ in range(KILLED_WRITERS):
            _killed_writer(persona.pk, redis.url, killed.channel)
        elapsed = time.perf_counter() - started
        verdicts.append(
            _report(killed, KILLED_WRITERS, elapsed, bar_ms=bound_ms, key="max_ms")
        )
    finally:
        bus.configure(redis_url="", channel="tomori:bench:idle")
        redis.stop()
        server.delete()
    return 0 if all(verdicts) else 1


def _report(
    scenario: Scenario, writes: int, elapsed: float, *, bar_ms: float, key: str
) -> bool:
    return _print(scenario.name, scenario.result(), writes, elapsed, bar_ms, key)


def _print(
    name: str,
    stats: dict[str, Any],
    writes: int,
    elapsed: float,
    bar_ms: float,
    key: str,
) -> bool:
    lag = stats["lag"]
    print(f"\n== {name}")
    print(f"writes committed:   {writes} in {elapsed:.2f} s")
    print(
        f"applied:            {stats['applied']} (from the outbox {stats['outbox_caught_up']}, "
        f"skipped there {stats['outbox_skipped']}; gaps {stats['gaps']}, "
        f"flushes {stats['flushes']}, disconnects {stats['disconnects']})"
    )
    if not lag["window"]:
        print("FAIL: no message was applied")
        return False
    print(
        f"lag p50 / p99 / max: {lag['p50_ms']:.3f} / {lag['p99_ms']:.3f} / "
        f"{lag['max_ms']:.3f} ms"
    )
    passed = lag[key] <= bar_ms and stats["applied"] >= writes
    what = "p99" if key == "p99_ms" else "worst staleness"
    print(
        f"{'PASS' if passed else 'FAIL'}: {what} {lag[key]:.3f} ms (bar: {bar_ms:g} ms)"
    )
    return passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=WRITES)
    parser.add_argument("--subscriber", metavar="CHANNEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscriber:
        run_subscriber(args.subscriber, args.writes)
        return 0
    return run_all(args.writes)


if __name__ == "__main__":
    sys.exit(main())
