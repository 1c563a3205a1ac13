"""Compare this tree's cache core with another checkout's: hit, set, re-set, invalidate.

Run: .venv/bin/python benchmarks/core_ab.py [--base /work/wt/base] [--rounds 9]

The same micro-benchmarks as `benchmarks/cache_core.py`'s hit and set rows
(sync `get` hit over 100,000 int keys; `set` of 1,000,000 new str keys into a
full cache of 10,000), plus a re-set of resident keys and a single-key
invalidate, run in two long-lived worker processes, one per checkout (its
root first on sys.path), alternating which goes first each round. Prints the
best ns/op of each side and the ratio base/this tree (above 1: this tree is
faster), with the command and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HIT_KEYS = 100_000
INSERTS = 1_000_000
CAP = 10_000
RESETS = 200_000


def _hit(cache_type: Any) -> float:
    keys = [175928847299117063 + i * 7919 for i in range(HIT_KEYS)]
    cache = cache_type("h", maxsize=HIT_KEYS, ttl=3600.0)
    for key in keys:
        cache.set(key, key)
    get = cache.get
    started = time.perf_counter()
    for key in keys:
        get(key)
    return (time.perf_counter() - started) / HIT_KEYS * 1e9


def _set_full(cache_type: Any) -> float:
    keys = [f"user:{i}" for i in range(INSERTS)]
    cache = cache_type("s", maxsize=CAP, ttl=3600.0)
    set_ = cache.set
    started = time.perf_counter()
    for key in keys:
        set_(key, 1)
    return (time.perf_counter() - started) / INSERTS * 1e9


def _reset(cache_type: Any) -> float:
    keys = [f"user:{i % CAP}" for i in range(RESETS)]
    cache = cache_type("r", maxsize=CAP, ttl=3600.0)
    for key in keys[:CAP]:
        cache.set(key, 0)
    set_ = cache.set
    started = time.perf_counter()
    for key in keys:
        set_(key, 1)
    return (time.perf_counter() - started) / RESETS * 1e9


def _invalidate(cache_type: Any) -> float:
    keys = [f"user:{i}" for i in range(RESETS)]
    cache = cache_type("i", maxsize=RESETS, ttl=3600.0)
    for key in keys:
        cache.set(key, 0)
    invalidate = cache.invalidate
    started = time.perf_counter()
    for key in keys:
        invalidate(key)
    return (time.perf_counter() - started) / RESETS * 1e9


BENCHES: dict[str, Callable[[Any], float]] = {
    "get hit (100,000 int keys)": _hit,
    f"set new key, full cache (cap {CAP:,})": _set_full,
    f"re-set a resident key (cap {CAP:,})": _reset,
    "invalidate one key": _invalidate,
}


def worker_main(checkout: str) -> None:
    """Answer one bench name per stdin line with its ns/op."""
    sys.path.insert(0, checkout)
    from caches.core import BoundedTTLCache

    for line in sys.stdin:
        print(json.dumps(BENCHES[line.strip()](BoundedTTLCache)), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="/work/wt/base")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--worker")
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker)
        return 0
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"load average at start: {os.getloadavg()}")
    sides = {"this tree": str(ROOT), "base": args.base}
    procs = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--worker", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=path,
        )
        for name, path in sides.items()
    }
    best = {bench: dict.fromkeys(sides, float("inf")) for bench in BENCHES}
    order = list(sides)
    try:
        for round_no in range(args.rounds):
            for bench in BENCHES:
                for name in order if round_no % 2 == 0 else order[::-1]:
                    proc = procs[name]
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(bench + "\n")
                    proc.stdin.flush()
                    ns = json.loads(proc.stdout.readline())
                    best[bench][name] = min(best[bench][name], ns)
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    print(f"best of {args.rounds} interleaved rounds, ns/op:")
    print(f"  {'bench':<40} {'this tree':>10} {'base':>10} {'base/this':>10}")
    for bench, figures in best.items():
        mine, theirs = figures["this tree"], figures["base"]
        print(f"  {bench:<40} {mine:10.1f} {theirs:10.1f} {theirs / mine:9.2f}x")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
