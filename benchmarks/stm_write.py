"""Benchmark the short-term memory write: cost per store and the longest pause at the cap.

Run: .venv/bin/python benchmarks/stm_write.py [--base /work/wt/base]
     [--stores 200000] [--rounds 4] [--cap 20000]

Two worker processes, one per checkout (this tree, and `--base`, e.g. a
checkout of the commit before a change), each import their own
`caches.layers.short_term_memory` with that checkout first on sys.path and
build a `ShortTermMemoryStore` at the cap (20,000, the default
SHORT_TERM_MEMORY_CACHE_MAX_ENTRIES). The stream is the same in both: guild
turns of the production scenario's shape (516 guilds x 8 channels, 62 users
per guild, each user in one channel), so each `store()` writes a user key and
the channel's server key, and 36,000 keys cycle through the 20,000 cap
(evictions all along). A store's keys are made resident first, untimed (what
the turn's reads do before the store: a miss hydrates, here from a stubbed
empty table); the durable queue's database apply is stubbed to nothing, so
what is timed is the store itself, its queueing included. The cache is
filled to the cap before the first timed round; rounds alternate which
checkout runs first.

Printed per checkout: median and p99 wall time of one `store()` (two keys),
the longest single store by wall time and by thread CPU time (the CPU time
leaves out the time this process was descheduled: the machine is shared),
and how many stores took over 2 ms of CPU. The cyclic GC is disabled while
timing (collected between rounds) so its pauses are not charged to either
store. Bars (this tree): median <= 10 us per store, no store over 2 ms CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GUILDS = 516
CHANNELS = 8
USERS_PER_GUILD = 62
KEEP = 9  # earlier messages a turn keeps (crude message count 10, minus this one)
MEDIAN_BAR_US = 10.0
PAUSE_BAR_MS = 2.0
SEED = 17


# ------------------------------------------------------------------ worker


async def _inline(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a database call on the loop (stubbed: nothing reaches a database)."""
    return fn(*args, **kwargs)


def _stub_database() -> None:
    """Keep both checkouts off the database: an empty table, a no-op apply."""
    from caches.layers.short_term_memory import hydration

    try:
        from tomori.domain.repositories import memory as repo
    except ImportError:  # a checkout from before tomori.domain (issue 30)
        from tomori.repositories import memory as repo

    repo.get_memory_record = lambda key, updated_since: None  # type: ignore[assignment]
    hydration.run_db = _inline  # type: ignore[assignment]


def _stream(count: int, seed: int) -> list[tuple[int, int, int]]:
    """Return `count` (user, server, channel) turns of the scenario's shape."""
    rng = random.Random(seed)
    turns = []
    for _ in range(count):
        guild = rng.randrange(GUILDS)
        member = rng.randrange(USERS_PER_GUILD)
        user = 10**6 + guild * USERS_PER_GUILD + member
        channel = 10**5 + guild * CHANNELS + member % CHANNELS
        turns.append((user, 10**4 + guild, channel))
    return turns


class Worker:
    """One checkout's store, filled to the cap, run round after round."""

    def __init__(self, cap: int) -> None:
        from caches.layers.short_term_memory import keys as k
        from caches.layers.short_term_memory.entry import StmMessage
        from caches.layers.short_term_memory.store import ShortTermMemoryStore

        _stub_database()
        self.k = k
        self.message_type = StmMessage
        self.store = ShortTermMemoryStore(maxsize=cap)
        self.store.writer._apply = lambda writes: None  # type: ignore[method-assign]
        self.store.writer._call = _inline
        self.seed = SEED

    async def _resident(self, user: int, server: int, channel: int) -> Any:
        """Make the turn's two keys resident (untimed); return the channel's entry."""
        cache = self.store.cache
        user_key = self.k.user_short_term_memory_key(user, channel)
        server_key = self.k.server_short_term_memory_key(server, channel)
        for key in (user_key, server_key):
            if key not in cache:
                await self.store.get(key)
        return cache.peek(server_key)

    def _messages(self, entry: Any, user: int) -> tuple[Any, ...]:
        from django.utils import timezone

        earlier = entry.messages[-KEEP:] if entry else ()
        new = self.message_type("user", f"message {user}", timezone.now(), "someone")
        return (*earlier, new)

    async def run(self, count: int, timed: bool) -> dict[str, Any]:
        """Run `count` stores; return their wall and CPU times (ns) if `timed`."""
        self.seed += 1
        wall: list[int] = []
        cpu: list[int] = []
        store = self.store.store
        perf, thread = time.perf_counter_ns, time.thread_time_ns
        gc.collect()
        gc.disable()
        try:
            for user, server, channel in _stream(count, self.seed):
                entry = await self._resident(user, server, channel)
                messages = self._messages(entry, user)
                c0 = thread()
                w0 = perf()
                await store(
                    user_disc_id=user,
                    channel_disc_id=channel,
                    messages=messages,
                    server_disc_id=server,
                    channel_name="general",
                    server_name="guild",
                )
                w1 = perf()
                c1 = thread()
                if timed:
                    wall.append(w1 - w0)
                    cpu.append(c1 - c0)
                if len(self.store.writer._pending) > 50_000:
                    await asyncio.sleep(0)  # let the stubbed durable queue drain
        finally:
            gc.enable()
        return {"wall": wall, "cpu": cpu, "size": len(self.store.cache)}


def worker_main(checkout: str, cap: int) -> None:
    """Serve `warm N` and `round N` commands on stdin, one JSON line each."""
    sys.path.insert(0, checkout)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
    os.environ["REDIS_URL"] = ""
    import django

    django.setup()
    worker = Worker(cap)
    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        command, count = line.split()
        result = loop.run_until_complete(worker.run(int(count), command == "round"))
        print(json.dumps(result), flush=True)
    # Ends the durable writer's parked task (else "Task was destroyed" at exit).
    loop.run_until_complete(worker.store.writer.flush())
    loop.close()


# ------------------------------------------------------------------ driver


def _spawn(checkout: str, cap: int) -> subprocess.Popen[str]:
    env = {**os.environ, "TOMORI_ENV_FILE": "/dev/null"}
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", checkout, "--cap", str(cap)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=checkout,
    )


def _ask(proc: subprocess.Popen[str], command: str) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())  # type: ignore[no-any-return]


def _summary(wall: list[int], cpu: list[int]) -> dict[str, float]:
    ordered = sorted(wall)
    return {
        "median_us": statistics.median(ordered) / 1000,
        "median_cpu_us": statistics.median(cpu) / 1000,
        "p99_us": ordered[int(len(ordered) * 0.99) - 1] / 1000,
        "max_wall_ms": ordered[-1] / 1e6,
        "max_cpu_ms": max(cpu) / 1e6,
        "over_bar": sum(1 for c in cpu if c > PAUSE_BAR_MS * 1e6),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="/work/wt/base")
    parser.add_argument("--stores", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cap", type=int, default=20_000)
    parser.add_argument("--worker")
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker, args.cap)
        return 0
    print(
        f"command: {' '.join([Path(sys.executable).name, *sys.argv])}\n"
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    checkouts = {"this tree": str(ROOT), "base": args.base}
    procs = {name: _spawn(path, args.cap) for name, path in checkouts.items()}
    samples: dict[str, dict[str, list[int]]] = {
        n: {"wall": [], "cpu": []} for n in procs
    }
    try:
        for proc in procs.values():
            _ask(proc, f"warm {2 * args.cap}")
        names = list(procs)
        per_round = args.stores // args.rounds
        for round_no in range(args.rounds):
            for name in names if round_no % 2 == 0 else names[::-1]:
                result = _ask(procs[name], f"round {per_round}")
                samples[name]["wall"] += result["wall"]
                samples[name]["cpu"] += result["cpu"]
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    return _report(samples, args)


def _report(samples: dict[str, dict[str, list[int]]], args: argparse.Namespace) -> int:
    print(
        f"{args.stores:,} stores per checkout at cap {args.cap:,}, "
        f"{args.rounds} interleaved rounds (two keys per store)"
    )
    print(
        f"{'checkout':<10} {'median':>9} {'p99':>9} {'median cpu':>11} "
        f"{'max wall':>10} {'max cpu':>9} {'>2ms cpu':>9}"
    )
    figures = {}
    for name, s in samples.items():
        f = figures[name] = _summary(s["wall"], s["cpu"])
        print(
            f"{name:<10} {f['median_us']:7.2f}us {f['p99_us']:7.2f}us "
            f"{f['median_cpu_us']:9.2f}us {f['max_wall_ms']:8.2f}ms {f['max_cpu_ms']:7.2f}ms {f['over_bar']:>9}"
        )
    new, old = figures["this tree"], figures["base"]
    print(
        f"ratio base/this tree: median {old['median_us'] / new['median_us']:.2f}x "
        f"(CPU {old['median_cpu_us'] / new['median_cpu_us']:.2f}x), "
        f"p99 {old['p99_us'] / new['p99_us']:.2f}x"
    )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    passed = new["median_us"] <= MEDIAN_BAR_US and new["over_bar"] == 0
    print(
        f"{'PASS' if passed else 'FAIL'}: median <= {MEDIAN_BAR_US} us per store, "
        f"no store over {PAUSE_BAR_MS} ms CPU (this tree)"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
