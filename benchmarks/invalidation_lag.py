"""Benchmark invalidation lag: commit in one process, applied in another, over Redis.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python benchmarks/invalidation_lag.py

The parent commits WRITES persona saves, one transaction each; a child
process (subscribed on a fresh channel, applying on its asyncio loop like the
bot worker) measures commit-to-applied lag. Prints p50/p99/max and a
PASS/FAIL line for the bar (p99 under 10 ms); exits 1 if it fails. The
database is created and migrated if missing.
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
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")

WRITES = 1000
P99_BAR_MS = 10.0
WAIT_SECONDS = 120.0


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
    here.start_subscriber(loop=loop)
    await loop.run_in_executor(
        None, here.stats.wait_for, lambda s: s["flushes"] >= 1, WAIT_SECONDS
    )
    print("ready", flush=True)
    await loop.run_in_executor(
        None, here.stats.wait_for, lambda s: s["applied"] >= expect, WAIT_SECONDS
    )
    print(json.dumps(here.snapshot()), flush=True)
    here.close()


# ---------------------------------------------------------------- publisher


def run_publisher(writes: int) -> int:
    """Parent: start the child, commit `writes` saves, report the child's lag."""
    _setup_django()
    _ensure_database()
    from django.db import transaction

    from caches import bus
    from tomori import models as m

    channel = f"tomori:bench:{uuid.uuid4().hex}"
    bus.configure(channel=channel)
    # Rows before the subscriber starts, so it sees exactly the `writes` saves.
    server = m.Server.objects.create(server_disc_id=900_000_000 + os.getpid())
    persona = m.Persona.objects.create(server=server, name="bench")
    child = subprocess.Popen(
        [sys.executable, __file__, "--subscriber", channel, "--writes", str(writes)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        started = time.perf_counter()
        for n in range(writes):
            with transaction.atomic():
                persona.name = f"bench-{n}"
                persona.save(update_fields=["name"])
        elapsed = time.perf_counter() - started
        stats = json.loads(child.stdout.readline())
    finally:
        child.wait(timeout=WAIT_SECONDS)
        server.delete()
    return _report(stats, writes, elapsed)


def _report(stats: dict[str, Any], writes: int, elapsed: float) -> int:
    lag = stats["lag"]
    print(f"writes committed:   {writes} in {elapsed:.2f} s ({writes / elapsed:.0f}/s)")
    print(
        f"messages applied:   {stats['applied']} of {stats['received']} received "
        f"(gaps {stats['gaps']}, flushes {stats['flushes']}, "
        f"disconnects {stats['disconnects']})"
    )
    if not lag["window"]:
        print("FAIL: no message was applied")
        return 1
    print(f"lag p50:            {lag['p50_ms']:.3f} ms")
    print(f"lag p99:            {lag['p99_ms']:.3f} ms")
    print(f"lag max:            {lag['max_ms']:.3f} ms")
    passed = lag["p99_ms"] < P99_BAR_MS and stats["applied"] >= writes
    verdict = "PASS" if passed else "FAIL"
    print(f"{verdict}: p99 {lag['p99_ms']:.3f} ms (bar: under {P99_BAR_MS:g} ms)")
    return 0 if passed else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=WRITES)
    parser.add_argument("--subscriber", metavar="CHANNEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscriber:
        run_subscriber(args.subscriber, args.writes)
        return 0
    return run_publisher(args.writes)


if __name__ == "__main__":
    sys.exit(main())
