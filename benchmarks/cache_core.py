"""Benchmark the cache core against dict, cachetools, theine and Django's LocMemCache.

Run: .venv/bin/python benchmarks/cache_core.py   (no Django project needed)

Every timing is the best of several rounds, with the candidates interleaved in
each round so they share the machine's conditions (it is shared and noisy).
The garbage collector stays on, as in production. cachetools is measured
through both `get` and `[]` (its fastest read), and FIFOCache (our eviction
policy) beside TTLCache (LRU); the bar compares against the fastest of them.
Prints ns/op, ratios and a PASS/FAIL line per bar; exits 1 if any bar fails.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cachetools  # noqa: E402

from caches.core import BoundedTTLCache  # noqa: E402

HIT_KEYS = 100_000
HIT_ROUNDS = 7
INSERTS = 1_000_000
INSERT_ROUNDS = 2
MEMORY_ENTRIES = 100_000
TTL = 3600.0

Bench = Callable[[], float]


def snowflakes(count: int, *, offset: int = 0) -> list[int]:
    """Return Discord-like 18-digit integer ids."""
    return [175928847299117063 + (offset + i) * 7919 for i in range(count)]


def best_ns_per_op(
    benches: dict[str, Bench], rounds: int, ops: int
) -> dict[str, float]:
    """Run each bench `rounds` times, interleaved; return the best ns/op of each."""
    best = dict.fromkeys(benches, float("inf"))
    for _ in range(rounds):
        for name, bench in benches.items():
            best[name] = min(best[name], bench() / ops * 1e9)
    return best


def loop_timer(fn: Callable[[Any], object], keys: list[Any]) -> Bench:
    """Return a bench that calls `fn(key)` for every key."""

    def bench() -> float:
        start = time.perf_counter()
        for key in keys:
            fn(key)
        return time.perf_counter() - start

    return bench


# ------------------------------------------------------------------ hits


def floor_bench(data: dict[int, int], keys: list[int]) -> Bench:
    """Time dict.get plus one time.monotonic() per key: the hit-path floor."""
    get, now = data.get, time.monotonic

    def bench() -> float:
        start = time.perf_counter()
        for key in keys:
            get(key)
            now()
        return time.perf_counter() - start

    return bench


def subscript_bench(mapping: Any, keys: list[int]) -> Bench:
    """Time `mapping[key]` (subscript syntax, cachetools' fastest read) per key."""

    def bench() -> float:
        start = time.perf_counter()
        for key in keys:
            mapping[key]
        return time.perf_counter() - start

    return bench


def await_bench(cache: BoundedTTLCache[int, int], keys: list[int]) -> Bench:
    """Time `await cache.get_or_load(key, loader)` on hits, inside one loop."""

    async def loader() -> int:
        raise AssertionError("a hit must not load")

    async def run() -> float:
        get_or_load = cache.get_or_load
        start = time.perf_counter()
        for key in keys:
            await get_or_load(key, loader)
        return time.perf_counter() - start

    return lambda: asyncio.run(run())


def theine_cache(keys: list[int]) -> tuple[Any, str]:
    """Return a filled theine Cache, or None and the reason it cannot be used."""
    try:
        from theine import Cache as TheineCache

        cache: Any = TheineCache(len(keys) * 2)
        for key in keys:
            cache.set(key, key, timedelta(seconds=TTL))
        hits = sum(cache.get(key)[1] for key in keys)
        if hits != len(keys):
            return None, f"theine kept only {hits} of {len(keys)} keys"
        return cache, ""
    except Exception as exc:  # report, do not abort the whole run
        return None, f"theine unusable: {exc!r}"


def locmem_cache(keys: list[int]) -> Any:
    """Return a filled Django LocMemCache, configuring minimal settings inline."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            CACHES={
                "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
            }
        )
    from django.core.cache.backends.locmem import LocMemCache

    cache = LocMemCache(
        "bench", {"TIMEOUT": TTL, "OPTIONS": {"MAX_ENTRIES": len(keys) * 2}}
    )
    for key in keys:
        cache.set(key, key)
    return cache


def measure_hits() -> tuple[dict[str, float], str]:
    """Time one hit on the same keys for every candidate."""
    keys = snowflakes(HIT_KEYS)
    data = {key: key for key in keys}
    ours: BoundedTTLCache[int, int] = BoundedTTLCache(
        "bench", maxsize=HIT_KEYS, ttl=TTL
    )
    ct: cachetools.TTLCache[int, int] = cachetools.TTLCache(HIT_KEYS, TTL)
    fifo: cachetools.FIFOCache[int, int] = cachetools.FIFOCache(HIT_KEYS)
    for key in keys:
        ours.set(key, key)
        ct[key] = key
        fifo[key] = key
    benches: dict[str, Bench] = {
        "dict.get": loop_timer(data.get, keys),
        "floor: dict.get + monotonic()": floor_bench(data, keys),
        "BoundedTTLCache.get": loop_timer(ours.get, keys),
        "await BoundedTTLCache.get_or_load": await_bench(ours, keys),
        "cachetools.TTLCache.get": loop_timer(ct.get, keys),
        "cachetools.TTLCache[k]": subscript_bench(ct, keys),
        "cachetools.FIFOCache.get": loop_timer(fifo.get, keys),
        "cachetools.FIFOCache[k]": subscript_bench(fifo, keys),
        "django LocMemCache.get": loop_timer(locmem_cache(keys).get, keys),
    }
    theine, why_not = theine_cache(keys)
    if theine is not None:
        benches["theine.Cache.get"] = loop_timer(theine.get, keys)
    assert all(ours.get(key) == key for key in keys[:1000])
    return best_ns_per_op(benches, HIT_ROUNDS, HIT_KEYS), why_not


# ------------------------------------------------------------------ inserts


def insert_bench(make: Callable[[], Any], keys: list[str], sizes: list[int]) -> Bench:
    """Time filling a fresh cache with every key (warm to the cap first)."""

    def bench() -> float:
        cache = make()
        store = cache.__setitem__ if hasattr(cache, "__setitem__") else cache.set
        start = time.perf_counter()
        for key in keys:
            store(key, 1)
        elapsed = time.perf_counter() - start
        sizes.append(len(cache))
        return elapsed

    return bench


def measure_inserts() -> tuple[dict[int, dict[str, float]], dict[int, int]]:
    """Time 1,000,000 distinct keys into full caches capped at 10k and 100k."""
    keys = [f"user:{key}" for key in snowflakes(INSERTS)]
    for key in keys:
        hash(key)  # str hashes are cached: pay for them outside the timing
    results: dict[int, dict[str, float]] = {}
    resident: dict[int, int] = {}
    for cap in (10_000, 100_000):
        ours_sizes: list[int] = []
        benches = {
            "BoundedTTLCache.set": insert_bench(
                partial(BoundedTTLCache, "bench", maxsize=cap, ttl=TTL),
                keys,
                ours_sizes,
            ),
            "cachetools.TTLCache[k] = v": insert_bench(
                partial(cachetools.TTLCache, cap, TTL), keys, []
            ),
            "cachetools.FIFOCache[k] = v": insert_bench(
                partial(cachetools.FIFOCache, cap), keys, []
            ),
        }
        results[cap] = best_ns_per_op(benches, INSERT_ROUNDS, INSERTS)
        resident[cap] = max(ours_sizes)
    return results, resident


# ------------------------------------------------------------------ memory


def traced_bytes_per_entry(
    fill: Callable[[list[Any], list[object]], Any], keys: list[Any]
) -> float:
    """Return tracemalloc bytes per entry for `fill`, keys and values excluded."""
    values = [object() for _ in keys]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    held = fill(keys, values)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del held
    return (after - before) / len(keys)


def rss_bytes() -> int:
    """Return this process's resident set size in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fill_ours(keys: list[Any], values: list[object]) -> Any:
    cache: BoundedTTLCache[Any, object] = BoundedTTLCache(
        "mem", maxsize=len(keys), ttl=TTL
    )
    for key, value in zip(keys, values, strict=True):
        cache.set(key, value)
    return cache


def fill_cachetools(keys: list[int], values: list[object]) -> Any:
    cache: cachetools.TTLCache[int, object] = cachetools.TTLCache(len(keys), TTL)
    for key, value in zip(keys, values, strict=True):
        cache[key] = value
    return cache


def fill_theine(keys: list[int], values: list[object]) -> Any:
    from theine import Cache as TheineCache

    cache: Any = TheineCache(len(keys) * 2)
    for key, value in zip(keys, values, strict=True):
        cache.set(key, value, timedelta(seconds=TTL))
    return cache


def theine_rss_per_entry() -> float:
    """Return theine's RSS growth per entry (its Rust core is not traced)."""
    keys = snowflakes(MEMORY_ENTRIES, offset=10**8)
    values = [object() for _ in keys]
    gc.collect()
    before = rss_bytes()
    held = fill_theine(keys, values)
    per_entry = (rss_bytes() - before) / MEMORY_ENTRIES
    del held
    return per_entry


def measure_memory() -> dict[str, float]:
    """Return bytes per entry beyond keys and values for each cache."""
    keys = snowflakes(MEMORY_ENTRIES, offset=10**7)
    str_keys = [f"user:{key}" for key in keys]
    memory = {
        "BoundedTTLCache (int keys)": traced_bytes_per_entry(fill_ours, keys),
        "BoundedTTLCache (str keys)": traced_bytes_per_entry(fill_ours, str_keys),
        "cachetools.TTLCache (int keys)": traced_bytes_per_entry(fill_cachetools, keys),
    }
    try:
        memory["theine.Cache (Python side only)"] = traced_bytes_per_entry(
            fill_theine, keys
        )
        memory["theine.Cache (RSS growth, all)"] = theine_rss_per_entry()
    except Exception as exc:
        print(f"theine memory not measured: {exc!r}")
    return memory


# ------------------------------------------------------------------ report


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report_hits(hits: dict[str, float], why_not: str) -> list[tuple[str, bool]]:
    floor = hits["floor: dict.get + monotonic()"]
    ours = hits["BoundedTTLCache.get"]
    print("\n== hit path: one get of a present key (100,000 int keys) ==")
    for name, ns in hits.items():
        print(f"  {name:36s} {ns:8.1f} ns/op   {ns / floor:6.2f}x floor")
    if why_not:
        print(f"  theine.Cache.get: not measured ({why_not})")
    print(
        "  policies: BoundedTTLCache evicts the oldest-inserted (FIFO) and expires\n"
        "  by TTL; cachetools.TTLCache evicts least-recently-used (LRU) and expires\n"
        "  by TTL; cachetools.FIFOCache is our eviction policy without TTL."
    )
    fastest_ttl = min(hits["cachetools.TTLCache.get"], hits["cachetools.TTLCache[k]"])
    bars = [
        (f"sync get <= 2.5x floor ({ours / floor:.2f}x)", ours <= 2.5 * floor),
        (
            "sync get >= 1.5x faster than cachetools.TTLCache's fastest read "
            f"({fastest_ttl / ours:.1f}x)",
            fastest_ttl >= 1.5 * ours,
        ),
    ]
    awaited = hits["await BoundedTTLCache.get_or_load"]
    bars.append(
        (
            f"await get_or_load hit <= 3x sync get ({awaited / ours:.2f}x)",
            awaited <= 3 * ours,
        )
    )
    return bars


def report_inserts(
    inserts: dict[int, dict[str, float]], resident: dict[int, int]
) -> list[tuple[str, bool]]:
    print("\n== set into a full cache: 1,000,000 distinct str keys ==")
    bars = []
    for cap, result in inserts.items():
        ours = result["BoundedTTLCache.set"]
        theirs = result["cachetools.TTLCache[k] = v"]
        for name, ns in result.items():
            print(
                f"  cap {cap:>7,}  {name:28s} {ns:8.1f} ns/op  {ns * INSERTS / 1e9:6.2f} s"
            )
        bars.append(
            (
                f"set at cap {cap:,} >= 3x faster than cachetools ({theirs / ours:.2f}x)",
                theirs >= 3 * ours,
            )
        )
    print(
        f"  resident after 1,000,000 never-read keys at cap 10,000: {resident[10_000]:,}"
    )
    bars.append(
        (
            f"resident <= 10,000 after 1,000,000 keys ({resident[10_000]:,})",
            resident[10_000] <= 10_000,
        )
    )
    return bars


def report_memory(memory: dict[str, float]) -> list[tuple[str, bool]]:
    print("\n== memory per entry beyond keys and values (100,000 entries, ttl set) ==")
    for name, per_entry in memory.items():
        print(f"  {name:36s} {per_entry:7.1f} B")
    print(
        "  note: theine keeps its policy state in a Rust core that tracemalloc\n"
        "  cannot see, hence its RSS row (RSS is coarse and noisy)."
    )
    ours = memory["BoundedTTLCache (int keys)"]
    return [(f"memory <= 100 B/entry ({ours:.1f} B, int keys)", ours <= 100)]


def main() -> int:
    """Run every measurement, print the report, return the exit status."""
    started = time.perf_counter()
    print(f"Python {sys.version.split()[0]}, cachetools {cachetools.__version__}")
    hits, why_not = measure_hits()
    inserts, resident = measure_inserts()
    memory = measure_memory()
    bars = report_hits(hits, why_not) + report_inserts(inserts, resident)
    bars += report_memory(memory)
    print("\n== bars ==")
    for label, ok in bars:
        print(f"  {verdict(ok)}  {label}")
    failed = sum(not ok for _, ok in bars)
    print(
        f"\n{len(bars) - failed} passed, {failed} failed "
        f"({time.perf_counter() - started:.0f} s)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
