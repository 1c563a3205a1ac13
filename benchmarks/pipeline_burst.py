"""Benchmark what a burst of messages holds while its turns wait: bounded intake vs one task each.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/pipeline_burst.py [--messages 3000] [--rounds 2]

Each measurement is a child process of its own (RSS a burst raises stays
raised, so one burst per process): the real discord.py client on the
in-process simulated Discord (production scenario, 516 guilds), every cache
cleared, the database thread held by a call that waits on an event (so
every turn stops at its first cache miss, as behind a slow database), then
--messages MESSAGE_CREATE payloads handed to discord.py's
`parse_message_create` (what the gateway does) and the loop run until every
event task has started. Then the hold is released and every turn finishes.

Two intakes, the same code: `PIPELINE_WORKERS` at its default (512: the
rest wait as queue slots) and at --messages (every message runs its turn
at once in its own event task: what the worker did before the intake).
Rounds alternate the order. Printed per intake: the RSS the burst added
(psutil, no tracing in that child), the bytes tracemalloc traced per message
(a second child), and the tasks alive while held. No bar: the figure is how
much memory a burst costs a 512 MB worker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tomori_bench")
os.environ["REDIS_URL"] = ""  # no invalidations published to workers on a shared Redis

MIB = 2**20


def rss_mb() -> float:
    """Return this process's resident set size in MB."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


async def burst(messages: int, traced: bool) -> dict[str, Any]:
    """Child: hold the database, send the burst, measure, release, wait for it."""
    import pipeline_turns as turns

    from caches.database import database_calls
    from caches.registry import registry

    harness = await turns.start_harness("production", keep_last=10)
    pipeline = harness.client.pipeline
    payloads = harness.novel_stream(messages)
    registry.clear_all()
    hold = threading.Event()
    held = asyncio.ensure_future(database_calls().run(hold.wait, 60))
    await asyncio.sleep(0)  # the held call reaches the database thread
    state = harness.client._connection
    gc.collect()
    if traced:
        tracemalloc.start(1)
    traced0, rss0 = tracemalloc.get_traced_memory()[0], rss_mb()
    for payload in payloads:
        state.parse_message_create(payload)
    for _ in range(10):  # every event task runs to its first wait
        await asyncio.sleep(0)
    traced1, rss1 = tracemalloc.get_traced_memory()[0], rss_mb()
    tasks = len(asyncio.all_tasks())
    waiting = pipeline.intake.waiting
    tracemalloc.stop()
    hold.set()
    with contextlib.suppress(Exception):  # past its deadline: DatabaseUnavailable
        await held
    await pipeline.wait_processed(pipeline.counters.received, timeout=120)
    await turns.stop_harness(harness)
    return {
        "rss_added_mb": round(rss1 - rss0, 1),
        "traced_per_message": round((traced1 - traced0) / messages),
        "tasks": tasks,
        "waiting": waiting,
        "outcomes": dict(pipeline.counters.outcomes),
    }


def child(workers: int, messages: int, traced: bool) -> dict[str, Any]:
    """Run one burst in a child process with PIPELINE_WORKERS=`workers`."""
    env = {
        **os.environ,
        "PIPELINE_WORKERS": str(workers),
        "TOMORI_ENV_FILE": "/dev/null",
    }
    command = [
        sys.executable,
        __file__,
        "--child",
        str(workers),
        "--messages",
        str(messages),
    ]
    if traced:
        command.append("--traced")
    done = subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"burst child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    """Run the rounds (or one child's burst) and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    import django

    django.setup()
    if options.child is not None:
        import logging

        logging.basicConfig(level=logging.CRITICAL)
        result = asyncio.run(burst(options.messages, options.traced))
        print(json.dumps(result), flush=True)
        return 0
    import pipeline as bench

    from tomori.domain.knobs import KNOBS_BY_NAME

    default_workers = int(KNOBS_BY_NAME["PIPELINE_WORKERS"].default)  # type: ignore[call-overload]

    bench.ensure_database("production")
    load = [os.getloadavg()]
    intakes = {
        f"bounded ({default_workers} workers)": default_workers,
        f"one task each ({options.messages} workers)": options.messages,
    }
    results: dict[str, dict[str, list[Any]]] = {
        label: {"rss": [], "traced": []} for label in intakes
    }
    for number in range(options.rounds):
        order = list(intakes) if number % 2 == 0 else list(intakes)[::-1]
        for label in order:
            results[label]["rss"].append(child(intakes[label], options.messages, False))
            results[label]["traced"].append(
                child(intakes[label], options.messages, True)
            )
        print(f"round {number + 1}/{options.rounds} done", file=sys.stderr)
    load.append(os.getloadavg())
    print(
        "command: DATABASE_URL=... "
        + " ".join([".venv/bin/python", "benchmarks/pipeline_burst.py", *sys.argv[1:]])
    )
    print(
        f"load: a burst of {options.messages:,} messages (production scenario, "
        f"caches cleared, database held), {options.rounds} alternated rounds; "
        "load average " + " -> ".join(" ".join(f"{x:.2f}" for x in avg) for avg in load)
    )
    print(
        f"{'intake':34} {'RSS added MB':>12} {'traced B/msg':>12} {'tasks':>6} {'waiting':>7}"
    )
    medians: dict[str, tuple[float, float]] = {}
    for label, runs in results.items():
        rss = statistics.median(r["rss_added_mb"] for r in runs["rss"])
        traced = statistics.median(r["traced_per_message"] for r in runs["traced"])
        medians[label] = (rss, traced)
        first = runs["rss"][0]
        print(
            f"{label:34} {rss:>12.1f} {traced:>12,.0f} {first['tasks']:>6} "
            f"{first['waiting']:>7}"
        )
    (bounded_rss, bounded_traced), (each_rss, each_traced) = medians.values()
    print(
        f"one task each / bounded: RSS added {each_rss / max(bounded_rss, 0.1):.2f}x, "
        f"traced bytes {each_traced / max(bounded_traced, 1):.2f}x (medians)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
