"""Benchmark the Discord event handlers: the longest loop block, caches at their default caps.

Run: .venv/bin/python benchmarks/event_handlers.py [--rounds 5]

Every scoped layer (channel whitelist, user and blacklist, channel LLM and
prompt overrides, personal spotlight, webhooks) and the server-keyed layers
are filled to their default caps with keys of the production scenario (516
guilds, members by Zipf s=1.0: the largest guild holds ~15% of each cache).
Then each handler of `tomori.bot.pipeline.discord_events` runs for the
largest guild, the coroutine stepped by hand so that every stretch between two
suspensions is timed: that stretch is how long the event loop is blocked.
The caches are refilled (and the fill's garbage collected) before each
handler. Bar: no stretch over 1 ms.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault("DATABASE_URL", "sqlite:///:memory:")
os.environ["REDIS_URL"] = ""

import django  # noqa: E402

django.setup()

from caches.layers import load_all  # noqa: E402
from caches.layers import user as user_layer  # noqa: E402
from caches.registry import registry  # noqa: E402

load_all()

BAR_MS = 1.0
GUILDS = 516
CHANNELS_PER_GUILD = 22
SERVER_ID_OFFSET = 10_000  # internal ids differ from the Discord ids


class _State:
    """Stands for a cached TomoriState: the handlers read only `server_id`."""

    def __init__(self, server_id: int) -> None:
        self.server_id = server_id


def guild_weights() -> list[float]:
    """Return each guild's share of traffic (Zipf s=1.0, largest first)."""
    raw = [1.0 / rank for rank in range(1, GUILDS + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def _map(name: str, member: str = "primary") -> Any:
    cache: Any = registry.get(name)
    return cache.maps()[member] if hasattr(cache, "maps") else cache


def _fill(
    cache: Any, make_key: Callable[[int, int], Any], weights: list[float]
) -> None:
    rng = random.Random(cache.name)
    guilds = rng.choices(range(GUILDS), weights=weights, k=cache.maxsize * 2)
    for i, guild in enumerate(guilds):
        if len(cache) >= cache.maxsize:
            return
        cache.set(make_key(guild + 1, i), object())


def fill_all(weights: list[float]) -> None:
    """Fill every scoped cache to its cap with production-shaped keys."""
    registry.clear_all()
    fresh = _map("tomori_state")
    for guild in range(1, GUILDS + 1):
        fresh.set(guild, _State(SERVER_ID_OFFSET + guild))
    roles = [frozenset({r, r + 1}) for r in range(50)]

    def channel(guild: int, i: int) -> int:
        return guild * 1000 + i % CHANNELS_PER_GUILD

    _fill(
        _map("channel_whitelist"),
        lambda g, i: (g, channel(g, i), 0, roles[i % 50] if i % 7 else i),
        weights,
    )
    # User rows to the cap, and each server's blacklist (one set per server).
    _fill(_map("user"), lambda g, i: i, weights)
    for guild in range(1, GUILDS + 1):
        _map("user").set(user_layer.blacklist_cache_key(guild), frozenset())
    for name in ("channel_llm", "channel_prompt"):
        _fill(_map(name), lambda g, i: (SERVER_ID_OFFSET + g, i), weights)
    _fill(
        _map("personal_spotlight"),
        lambda g, i: (SERVER_ID_OFFSET + g, i, channel(g, i)),
        weights,
    )
    _fill(
        _map("webhook"),
        lambda g, i: ("persona", channel(g, i), i) if i % 3 else channel(g, i) + i,
        weights,
    )
    for name in ("emoji_sticker", "guild_mcp_config", "st_preset"):
        if name in registry:
            cache = _map(name)
            for guild in range(1, min(GUILDS, cache.maxsize) + 1):
                cache.set(SERVER_ID_OFFSET + guild, object())


def blocked_stretches(coro: Coroutine[Any, Any, Any]) -> list[float]:
    """Run `coro` to the end by hand; return each stretch between suspensions (s)."""
    stretches = []
    while True:
        start = time.perf_counter()
        try:
            yielded = coro.send(None)
        except StopIteration:
            stretches.append(time.perf_counter() - start)
            return stretches
        stretches.append(time.perf_counter() - start)
        if yielded is not None:  # a real future: these handlers await none here
            raise RuntimeError(f"the handler waited on {yielded!r}")


async def _sync(fn: Callable[[], int]) -> int:
    return fn()


def handlers() -> dict[str, Callable[[], Coroutine[Any, Any, Any]]]:
    """Return each handler, bound to the largest guild and its busiest channel."""
    from tomori.bot.pipeline import discord_events as events

    guild, busiest = 1, 1000
    channels = [1000 + i for i in range(CHANNELS_PER_GUILD)]
    return {
        "guild_removed": lambda: events.guild_removed(guild, channels),
        "role_deleted": lambda: events.role_deleted(guild),
        "channel_changed": lambda: events.channel_changed(guild, busiest),
        "webhooks_changed": lambda: _sync(lambda: events.webhooks_changed(busiest)),
        "expressions_changed": lambda: events.expressions_changed(guild),
    }


def main() -> int:
    """Run every handler `--rounds` times; print its longest stretch and the bar."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    weights = guild_weights()
    print(f"command: {' '.join(sys.argv)}")
    print(
        f"load average: {os.getloadavg()[0]:.2f}; largest guild share {weights[0]:.1%}"
    )
    worst: dict[str, list[float]] = {}
    removed: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, start in handlers().items():  # interleaved: one of each per round
            fill_all(weights)
            gc.collect()  # the fill's garbage is the benchmark's, not the handler's
            before = sum(registry.sizes().values())
            stretches = blocked_stretches(start())
            removed[name] = before - sum(registry.sizes().values())
            worst.setdefault(name, []).append(max(stretches))
    print(
        f"{'handler':<20} {'entries dropped':>16} {'longest block, median':>22} {'max':>9}"
    )
    failed = False
    for name, samples in worst.items():
        med, top = statistics.median(samples) * 1e3, max(samples) * 1e3
        failed |= top > BAR_MS
        print(f"{name:<20} {removed[name]:>16,} {med:>19.3f} ms {top:>6.3f} ms")
    print(f"bar: no stretch over {BAR_MS} ms: {'FAIL' if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
