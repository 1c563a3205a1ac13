"""Benchmark the longest event-loop block while a worker applies a 10,000-row UPDATE made outside Django.

Run: .venv/bin/python benchmarks/outside_bulk_block.py [--rounds 5] 2>/dev/null
(the worker's INFO lines go to stderr, as in a worker: their cost is measured)

This process plays the worker: the real bus (local mode) following the
invalidation outbox every bound/4, applying on its asyncio loop, with the
`tomori_state` cache holding an entry for each of the ROWS servers. A second
client with no Django in it (a psycopg connection of its own, as psql would)
commits `UPDATE personas SET name = ...` over ROWS personas of ROWS servers;
the database's capture triggers record ROWS x 3 events in outbox rows of at
most CHUNK events. Every loop callback is timed (asyncio's `Handle._run`),
as benchmarks/event_handlers.py times Discord handlers: the figure is the
longest single callback while the rows are applied, beside how many rows and
how long from COMMIT to the last applied. Bar: the longest block at most 1
ms, less the cyclic collector's pauses inside it, and over the callbacks the
OS did not preempt (a 2-core VM with PostgreSQL beside it takes the CPU from
a runnable thread now and then: an involuntary context switch,
`getrusage(RUSAGE_THREAD).ru_nivcsw`, not a wait for the GIL); both are
printed apart: CPython collects in whichever code allocates past its
threshold (a Discord handler as well), as benchmarks/event_handlers.py keeps
them out by collecting before each handler. As the worker does at gateway
ready (tomori.bot.gc_policy), the start-up heap is frozen first. The
database (tomori_bench_writers_block) is created, migrated and seeded if
missing (as benchmarks/write_overhead.py does).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault(
    "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tomori_bench_writers_block"
)
os.environ["TOMORI_ENV_FILE"] = os.devnull
os.environ["REDIS_URL"] = ""

BAR_MS = 1.0
APP = "bench-outside-bulk"
#: (wall, thread CPU, collector) seconds of every loop callback since the last
#: clear, and whether the OS preempted it (an involuntary context switch).
blocks: list[tuple[float, float, float, bool]] = []
#: Seconds the cyclic collector ran on the loop's thread, per generation.
collections: dict[int, list[float]] = {0: [], 1: [], 2: []}
#: [when the running collection began, collector seconds in this callback]
_collecting = [0.0, 0.0]
#: Set by the benchmark's own task: the callback running now is not timed
#: (its thread pool start-up and bookkeeping are not the worker's).
_untimed = [False]


def _involuntary_switches() -> int:
    """Return how often the OS has taken the CPU from this thread while it could run."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw


def _time_callbacks() -> None:
    """Time every loop callback (the stretch the loop is blocked), wall and CPU.

    On a loaded machine the wall time of a callback includes the time the
    thread was descheduled; its CPU time is what the callback itself costs.
    The cyclic collector's pauses inside a callback are timed apart: CPython
    runs a collection in whichever code allocates past its threshold, a
    Discord handler as well as this path (see the module's doc).
    """
    run = asyncio.events.Handle._run
    loop_thread = threading.get_ident()

    def collector(phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != loop_thread:
            return
        if phase == "start":
            _collecting[0] = time.perf_counter()
            return
        took = time.perf_counter() - _collecting[0]
        _collecting[1] += took
        collections[info["generation"]].append(took)

    def timed(handle: Any) -> None:
        _collecting[1] = 0.0
        switches = _involuntary_switches()
        wall, cpu = time.perf_counter(), time.thread_time()
        run(handle)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        preempted = _involuntary_switches() > switches
        if _untimed[0]:
            _untimed[0] = False
            return
        blocks.append((wall, cpu, _collecting[1], preempted))

    gc.callbacks.append(collector)
    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


def _fill(disc_ids: list[int]) -> None:
    from caches.registry import registry

    cache: Any = registry.get("tomori_state")
    for disc in disc_ids:
        cache.primary.set(disc, [])  # a fresh entry for every server


def _write(dsn: str, tag: str) -> tuple[float, int]:
    """Commit the bulk UPDATE from a client of its own; return when COMMIT returned
    and how many outbox rows it wrote.

    One connection, opened before and counting after: nothing but this
    thread's waits on the database runs beside the worker's loop meanwhile
    (opening a connection is milliseconds of Python that would hold the GIL).
    """
    import psycopg
    from write_overhead import DISC

    with psycopg.connect(dsn, application_name=APP, autocommit=True) as client:
        high = _one(
            client, "SELECT coalesce(max(id), 0) FROM caches_invalidation_outbox"
        )
        client.execute(
            "UPDATE personas SET name = %s WHERE server_id IN (SELECT id FROM "
            "servers WHERE server_disc_id > %s)",
            [tag, DISC],
        )
        committed = time.monotonic()
        rows = _one(
            client,
            "SELECT count(*) FROM caches_invalidation_outbox WHERE origin LIKE %s "
            "AND id > %s",
            [f"database:{APP}:%", high],
        )
        return committed, rows


def _one(client: Any, sql: str, params: list[Any] | None = None) -> int:
    row = client.execute(sql, params).fetchone()
    assert row is not None
    return int(row[0])


async def _round(dsn: str, tag: str, disc_ids: list[int]) -> dict[str, float]:
    from caches import bus

    applied: list[float] = []  # when each outbox row was applied
    applying: list[tuple[float, float]] = []  # (wall, CPU) of each step of a row
    core = bus.get_bus().applier
    apply_steps = core._apply_steps

    def counted(delivery: Any, budget: int | None) -> tuple[int, bool]:
        wall, cpu = time.perf_counter(), time.thread_time()
        done = apply_steps(delivery, budget)
        if delivery.origin.startswith(f"database:{APP}:"):
            applying.append((time.perf_counter() - wall, time.thread_time() - cpu))
            if done[1]:
                applied.extend(
                    [time.monotonic()] * len(getattr(delivery.events, "parts", [1]))
                )
        return done

    core._apply_steps = counted  # type: ignore[method-assign]
    _fill(disc_ids)
    await asyncio.sleep(0.6)  # let the fill's own callbacks pass
    blocks.clear()
    for paused in collections.values():
        paused.clear()
    _untimed[0] = True
    committed, rows = await asyncio.to_thread(_write, dsn, tag)
    while len(applied) < rows:
        if time.monotonic() - committed > 60:
            raise SystemExit(f"{len(applied)} of {rows} rows applied after 60 s")
        _untimed[0] = True
        await asyncio.sleep(0.01)
    _untimed[0] = True
    return {
        "rows": rows,
        "apply_ms": max(w for w, _ in applying) * 1000,
        "apply_cpu_ms": max(c for _, c in applying) * 1000,
        "longest_ms": max(b[0] for b in blocks) * 1000,
        "longest_cpu_ms": max(b[1] for b in blocks) * 1000,
        "own_ms": max(w - g for w, _, g, preempted in blocks if not preempted) * 1000,
        "own_cpu_ms": max(c - g for _, c, g, _ in blocks) * 1000,
        "preempted": sum(1 for b in blocks if b[3]),
        "preempted_ms": max((b[0] for b in blocks if b[3]), default=0.0) * 1000,
        "gc_ms": max(max(p, default=0.0) for p in collections.values()) * 1000,
        "gc_counts": tuple(len(p) for p in collections.values()),
        "last_applied_s": applied[-1] - committed,
        "callbacks": len(blocks),
    }


def _setup() -> tuple[str, list[int]]:
    """Return the database's DSN and the servers' ids.

    `_prepare` empties the outbox restarting its ids: on an empty outbox the
    follower starts at id 0 and takes every id below the next row for an
    open gap (more than 10,000 of them flush every cache).
    """
    from django.conf import settings
    from django.db import connection
    from write_overhead import DISC

    from caches.layers import build_registry

    build_registry()
    db = settings.DATABASES["default"]
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT server_disc_id FROM servers WHERE server_disc_id > %s", [DISC]
        )
        disc_ids = [row[0] for row in cursor.fetchall()]
    connection.close()
    return dsn, disc_ids


async def _main(rounds: int, dsn: str, disc_ids: list[int]) -> list[dict[str, float]]:
    from caches import bus
    from caches.bus.core import OutboxOptions
    from tomori.domain.knobs import knobs

    bound = knobs().INVALIDATION_STALENESS_BOUND_SECONDS
    bus.configure(redis_url="", channel=f"tomori:bench:block:{os.getpid()}")
    bus.get_bus().start_subscriber(
        loop=asyncio.get_running_loop(),
        outbox=OutboxOptions(interval=bound / 4, retention=3600.0),
    )
    await asyncio.sleep(1.0)  # the follower's first poll takes its start
    results = [
        await _round(dsn, f"block{os.getpid()}-{r}", disc_ids) for r in range(rounds)
    ]
    bus.get_bus().stop()
    return results


#: Verdicts on these (the path's own work); the others are printed beside.
BARRED = ("own_ms", "own_cpu_ms")
LABELS = {
    "own_cpu_ms": "longest loop callback less the collector's pauses, CPU",
    "own_ms": "longest loop callback less the collector's pauses, wall, "
    "of those the OS did not preempt",
    "apply_cpu_ms": "longest step of a row applied, CPU",
    "apply_ms": "longest step of a row applied, wall",
    "longest_cpu_ms": "longest loop callback of any kind, CPU",
    "longest_ms": "longest loop callback of any kind, wall",
    "gc_ms": "longest pause of the cyclic collector on the loop",
    "preempted_ms": "longest loop callback the OS preempted (involuntary switch), wall",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import django

    django.setup()
    from write_overhead import _prepare

    _prepare()
    dsn, disc_ids = _setup()
    from tomori.bot.gc_policy import freeze_start_up

    freeze_start_up()  # as the worker does at gateway ready
    _time_callbacks()
    results = asyncio.run(_main(args.rounds, dsn, disc_ids))
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"load: one UPDATE of {len(results) and 10_000:,} personas (one server each) "
        f"by a second client, {args.rounds} rounds; load average "
        f"{os.getloadavg()[0]:.1f}; threads {threading.active_count()}"
    )
    for r, res in enumerate(results):
        print(
            f"round {r}: {res['rows']:.0f} outbox rows; longest step applying them "
            f"{res['apply_ms']:.3f} ms wall, {res['apply_cpu_ms']:.3f} ms CPU; "
            f"longest of all {res['callbacks']:.0f} loop callbacks "
            f"{res['longest_ms']:.3f} ms wall, {res['longest_cpu_ms']:.3f} ms CPU; "
            f"last row applied {res['last_applied_s']:.3f} s after COMMIT; "
            f"collections on the loop by generation {res['gc_counts']}, longest "
            f"{res['gc_ms']:.3f} ms; {res['preempted']:.0f} callback(s) preempted "
            "by the OS"
        )
    for kind, what in LABELS.items():
        worst = max(res[kind] for res in results)
        median = statistics.median(res[kind] for res in results)
        verdict = ""
        if kind in BARRED:
            verdict = " (ok)" if worst <= BAR_MS else f" (over the {BAR_MS} ms bar)"
        print(f"{what}: median {median:.3f} ms, max {worst:.3f} ms{verdict}")


if __name__ == "__main__":
    main()
