"""What handing a call to the database thread costs the process, before any query.

Run: .venv/bin/python benchmarks/db_call_overhead.py [--calls 20000] [--rounds 3]

The worker's database reads run in Django's database thread
(`caches.database.run_db`). Each one crosses threads twice (the call there,
the answer back through the loop's self-pipe), whatever the query. This
times a call that does nothing, three ways, interleaved round by round:

- floor: `loop.run_in_executor` on the same thread (the handover alone);
- run_db: the worker's path (deadline, breaker, connection checks);
- sync_to_async: Django's documented path (`asgiref.sync.sync_to_async`)
  under `asyncio.wait_for`, what `run_db` ran until it submitted itself.

Printed: the process's CPU per call (both threads) and wall time per call,
medians over the rounds. No database is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WAYS = ("floor", "run_db", "sync_to_async")


def _nothing(value: int) -> int:
    return value


def _ways() -> dict[str, Callable[[int], Awaitable[Any]]]:
    from asgiref.sync import SyncToAsync, sync_to_async

    from caches.database import run_db

    thread = SyncToAsync.single_thread_executor  # Django's database thread

    async def floor(value: int) -> int:
        return await asyncio.get_running_loop().run_in_executor(thread, _nothing, value)

    async def documented(value: int) -> int:
        return await asyncio.wait_for(sync_to_async(_nothing)(value), 5.0)

    async def worker(value: int) -> int:
        return await run_db(_nothing, value)

    return {"floor": floor, "run_db": worker, "sync_to_async": documented}


async def _round(
    way: Callable[[int], Awaitable[Any]], calls: int
) -> tuple[float, float]:
    await way(0)
    cpu, wall = time.process_time(), time.perf_counter()
    for value in range(calls):
        await way(value)
    return (
        (time.process_time() - cpu) * 1e6 / calls,
        (time.perf_counter() - wall) * 1e6 / calls,
    )


def child(options: argparse.Namespace) -> None:
    """Run the rounds in this process (Django set up) and print the table."""
    import django

    django.setup()
    ways = _ways()
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    for number in range(options.rounds):
        for name in WAYS if number % 2 == 0 else WAYS[::-1]:
            results[name].append(asyncio.run(_round(ways[name], options.calls)))
    print(f"calls a round: {options.calls}, {options.rounds} rounds, interleaved")
    print(f"{'way':<16}{'process CPU/call':>18}{'wall/call':>12}")
    for name in WAYS:
        cpu = statistics.median(row[0] for row in results[name])
        wall = statistics.median(row[1] for row in results[name])
        print(f"{name:<16}{cpu:>15.1f} us{wall:>9.1f} us")


def main() -> None:
    """Run the measurement in a child with the benchmarks' settings."""
    from benchmarks.processes import parent_or_child

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parent_or_child(__file__, parser, child)


if __name__ == "__main__":
    main()
