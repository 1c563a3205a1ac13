"""Time layer hits (tomori_state, user row, whitelist, spotlight) in a checkout, or this one.

Run: DATABASE_URL=... .venv/bin/python benchmarks/layer_hit.py [path/to/checkout]

Compare two checkouts by running this alternately in each (several times,
interleaved) and keeping each figure's best: a hit is a coroutine that awaits
nothing, driven here without an event loop. Prints ns per hit, then each net
of an empty coroutine driven the same way (what every async hit pays before
its own work).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent)
CALLS = 200_000
ROUNDS = 7


def drive(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a coroutine that must not suspend (a hit) and return its value."""
    coro = fn(*args)
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"{fn.__name__} awaited: not a hit")


def best_ns(call: Callable[[int], Any], keys: list[int]) -> float:
    """Return the best ns per call of `call` over ROUNDS rounds."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for i in range(CALLS):
            call(keys[i % len(keys)])
        best = min(best, time.perf_counter() - start)
    return best / CALLS * 1e9


def main() -> None:
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
    import django

    django.setup()
    from datetime import timedelta

    from django.utils import timezone

    from caches.layers import (
        channel_whitelist,
        load_all,
        personal_spotlight,
        tomori_state,
        user,
    )
    from tomori.repositories.spotlight import SpotlightRecord

    load_all()
    keys = list(range(10**17, 10**17 + 1000))
    for key in keys:
        tomori_state._fresh.set(key, object())
        user._cache.set(key, None)
        # Channel 5: an answer kept per role set (a server with a role
        # whitelist); channel 6: one answer for every role set ("*"), which a
        # build without that slot ignores (it finds the role-keyed entry).
        channel_whitelist._cache.set((key, 5, 0, None), True)
        channel_whitelist._cache.set((key, 6, 0, None), True)
        channel_whitelist._cache.set((key, 6, 0, "*"), True)
    later = timezone.now() + timedelta(hours=1)
    spot_keys = keys[:500]  # three entries each: within the 2,000 default cap
    for key in spot_keys:
        personal_spotlight._gate.set(key, True)
        personal_spotlight._results.set((key, 1, 5), None)  # no spotlight
        personal_spotlight._results.set((key, 2, 5), SpotlightRecord(9, None))
        personal_spotlight._results.set((key, 3, 5), SpotlightRecord(9, later))
    spotlight = personal_spotlight.get_cached_personal_spotlight_status

    async def awaits_nothing(key: int, *_: int) -> int:
        return key

    figures = {
        # What every row below includes: a coroutine built, sent, finished.
        "empty_coroutine": best_ns(lambda k: drive(awaits_nothing, k, 5), keys),
        "tomori_state": best_ns(
            lambda k: drive(tomori_state.get_cached_tomori_state, k), keys
        ),
        "user_row": best_ns(lambda k: drive(user.get_cached_user_row, k), keys),
        "whitelist_per_role_set": best_ns(
            lambda k: drive(channel_whitelist.get_cached_whitelist_status, k, 5), keys
        ),
        "whitelist_any_roles": best_ns(
            lambda k: drive(channel_whitelist.get_cached_whitelist_status, k, 6), keys
        ),
        "spotlight_none": best_ns(lambda k: drive(spotlight, k, 1, 5), spot_keys),
        "spotlight_open_ended": best_ns(lambda k: drive(spotlight, k, 2, 5), spot_keys),
        "spotlight_expiring": best_ns(lambda k: drive(spotlight, k, 3, 5), spot_keys),
    }
    print(" ".join(f"{name}={ns:.1f}ns" for name, ns in figures.items()))
    base = figures.pop("empty_coroutine")
    print(
        "net of the empty coroutine: "
        + " ".join(f"{name}={ns - base:.1f}ns" for name, ns in figures.items())
    )


if __name__ == "__main__":
    main()
