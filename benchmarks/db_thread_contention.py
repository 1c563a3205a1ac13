"""What a database read costs the database thread while the event loop is busy (the GIL).

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \
     .venv/bin/python benchmarks/db_thread_contention.py [--reads 1000] [--rounds 3]

The worker's reads run in Django's database thread (`caches.database.run_db`);
psycopg releases the GIL around each libpq call and takes it back after, so
a read takes the GIL several times. While the event loop thread holds the GIL
(a turn, a gateway frame), each take waits, and every time the loop lets go
of the GIL for a moment (each `epoll_wait`, also at timeout 0) the waiting
thread is woken and usually finds the GIL taken again. This measures a
compiled user-row read (`get_user_by_disc_id`, the turns' commonest read)
through `run_db` against three loops, interleaved round by round:

- idle: the loop only awaits the reads (the read's floor);
- half busy: a coroutine alternates ~100 us of Python with a 100 us sleep;
- saturated: it runs ~100 us of Python between `asyncio.sleep(0)`s (a
  worker that never idles: a full shard falling behind).

Printed per loop, per read: the database thread's CPU (user+system, from
/proc), its voluntary context switches, the process's CPU apart from the
busy coroutine's own (the loop thread's CPU is charged to it), and wall
time. The database is the one DATABASE_URL names (seeded with the
production scenario if it is not: the users table must exist).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOOPS = ("idle", "half busy", "saturated")
CHUNK = 3_000  # additions: about 100 us of Python


def _ticks(native_id: int) -> tuple[int, int]:
    """Return a thread of this process's CPU ticks and voluntary context switches."""
    stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    switches = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
    return int(fields[11]) + int(fields[12]), switches


async def _busy(stop: asyncio.Event, pause: float, spent: list[float]) -> None:
    """Keep the loop busy: ~100 us of Python, then `pause` s of sleep, until stopped."""
    while not stop.is_set():
        started = time.thread_time()
        total = 0
        for i in range(CHUNK):
            total += i
        spent[0] += time.thread_time() - started
        await asyncio.sleep(pause)


async def _round(loop_kind: str, ids: list[int], reads: int) -> dict[str, float]:
    from caches.database import run_db
    from tomori.domain.repositories.users import get_user_by_disc_id

    where: list[int] = []

    def read(disc_id: int) -> Any:
        if not where:
            where.append(threading.get_native_id())
        return get_user_by_disc_id(disc_id)

    await run_db(read, ids[0])  # the thread, its connection and the compiled query
    stop, spent = asyncio.Event(), [0.0]
    busy = None
    if loop_kind != "idle":
        pause = 0.0 if loop_kind == "saturated" else 0.0001
        busy = asyncio.create_task(_busy(stop, pause, spent))
        await asyncio.sleep(0.05)
    db_before = _ticks(where[0])
    process_before = time.process_time()
    spent[0] = 0.0
    wall_before = time.perf_counter()
    for disc_id in ids[1 : reads + 1]:
        await run_db(read, disc_id)
    wall = time.perf_counter() - wall_before
    process = time.process_time() - process_before - spent[0]
    db_after = _ticks(where[0])
    stop.set()
    if busy is not None:
        await busy
    return {
        "db_cpu_ms": (db_after[0] - db_before[0])
        * 1000
        / os.sysconf("SC_CLK_TCK")
        / reads,
        "switches": (db_after[1] - db_before[1]) / reads,
        "process_ms": process * 1000 / reads,
        "wall_ms": wall * 1000 / reads,
    }


def child(options: argparse.Namespace) -> None:
    """Run the rounds in this process (Django set up) and print the table."""
    import django

    django.setup()
    from tomori.domain.models import User

    ids = list(User.objects.values_list("user_disc_id", flat=True)[: options.reads + 1])
    if len(ids) < options.reads + 1:
        raise SystemExit(f"the users table holds {len(ids)} rows: seed it first")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in LOOPS}
    reads = {kind: options.reads for kind in LOOPS}
    reads["saturated"] = max(options.reads // 10, 10)  # each read takes far longer
    for number in range(options.rounds):
        order = LOOPS if number % 2 == 0 else LOOPS[::-1]
        for kind in order:
            results[kind].append(asyncio.run(_round(kind, ids, reads[kind])))
    print(
        f"reads a round: {options.reads} ({reads['saturated']} saturated), "
        f"{options.rounds} rounds, loops interleaved"
    )
    print(
        f"{'loop':<12}{'db thread CPU/read':>20}{'its switches/read':>19}"
        f"{'process CPU/read':>18}{'wall/read':>11}"
    )
    for kind in LOOPS:
        rows = results[kind]

        def median(name: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(row[name] for row in rows)

        print(
            f"{kind:<12}{median('db_cpu_ms'):>17.3f} ms{median('switches'):>19.1f}"
            f"{median('process_ms'):>15.3f} ms{median('wall_ms'):>8.2f} ms"
        )
    idle = statistics.median(row["db_cpu_ms"] for row in results["idle"]) or 1e-9
    for kind in LOOPS[1:]:
        busy = statistics.median(row["db_cpu_ms"] for row in results[kind])
        print(f"database thread CPU a read, {kind} / idle: {busy / idle:.1f}x")


def main() -> None:
    """Seed if needed, then run the measurement in a child with production settings."""
    from benchmarks.processes import parent_or_child

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reads",
        type=int,
        default=1000,
        help="a round's reads (a tenth when saturated)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parent_or_child(__file__, parser, child, scenario="production")


if __name__ == "__main__":
    main()
