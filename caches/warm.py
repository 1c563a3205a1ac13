"""Warm the per-guild layers before the gateway is ready, in a few queries per table.

Without it, each guild's first turn after a start loads its entries one by
one (its Tomori state, whitelist rows, override gates, expressions, presets,
sprites...): 516 guilds at 300 msg/s is a few thousand queries in the first
seconds, and the turns queue behind them. Here the worker loads them for the
guilds of its shards (every server when unsharded: `shard_servers`) in
batches of WARM_BATCH servers, each layer that declares `Layer.warm` in a
few queries per batch, before it logs in.

Bounded:
- in time, by WORKER_WARM_TIMEOUT_SECONDS for the whole step: past it, what
  is warm stays and the rest loads on first use; a failing database ends the
  step at its first error. Either way the worker starts, and says so in one
  line;
- in memory, by each map's own cap: a warm-up stores only into the room left
  (`BoundedTTLCache.reserve`), never evicting.

Coherent: each key is held as a load while its query runs, so an invalidation
(the bus is subscribed before the warm-up) keeps its value out, as it keeps
out a `get_or_load`'s; what is stored is what the layer's own loader would
store (tests/caches/layers/test_warm.py compares them, layer by layer).

Kept warm (refresh-ahead): the warm-up stores every guild's entries at one
moment, so without more they would all expire together one TTL later and
come back one miss, one query at a time (measured on the production
scenario ten minutes after a start: 0.2 loads and 0.4 round trips a message
more, a full shard's 27,000 entries at once). So the worker refreshes each
warmed layer every half of its shortest TTL (`RefreshSchedule`): the same
bulk queries inside `caches.core.refreshing()`, which reload only the keys
still resident, each with a fresh deadline, and add none. A value is never
older than its TTL (it is younger), nothing is stored past a cap, and an
emergency clear stays cleared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from caches.core import Clock, refreshing
from caches.database import run_db
from caches.db_outage import DB_ERRORS
from caches.layers import declared_layers
from caches.layers.declaration import GuildBatch, Layer
from caches.registry import registry
from tomori.domain.repositories import servers as servers_repo

logger = logging.getLogger(__name__)

#: Servers per batch: every layer's queries take this many ids at most.
WARM_BATCH = 1000
#: A refresh runs beside the turns, so it goes in smaller steps with a pause
#: after each: the database thread converting a batch's rows holds the GIL,
#: and a full shard's 1,000-server steps stalled the turns (a backlog of 100
#: at 250 msg/s). 250 servers and 20 ms: about 10 s for 2,580 guilds.
REFRESH_BATCH = 250
REFRESH_PAUSE_SECONDS = 0.02
#: A refresh's own bound (it is not the start's critical path): well inside
#: the shortest period (150 s for a 5-minute TTL).
REFRESH_TIMEOUT_SECONDS = 60.0


@dataclass
class WarmReport:
    """What a warm-up did: guilds, entries stored per layer, time, how it ended."""

    guilds: int = 0
    entries: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    #: Why it stopped early ("" when every layer of every guild was warmed).
    stopped: str = ""

    @property
    def stored(self) -> int:
        """Return the entries stored, all layers together."""
        return sum(self.entries.values())

    def line(self) -> str:
        """Return the one log line saying what was warmed (or that the start is cold)."""
        done = (
            f"warmed {self.stored:,} entries of {len(self.entries)} layers for "
            f"{self.guilds:,} guilds in {self.seconds:.2f} s"
        )
        if not self.stopped:
            return done
        if not self.stored:
            return f"caches not warmed ({self.stopped}): the worker starts cold"
        return f"{done}, then stopped ({self.stopped}): the rest loads on first use"


#: The order a turn reads them in, so a warm-up cut short by its deadline has
#: done the first reads of every guild first; others follow, as declared.
TURN_ORDER = (
    "tomori_state",
    "channel_whitelist",
    "personal_spotlight",
    "channel_llm",
    "channel_prompt",
    "persona_sprite",
    "emoji_sticker",
    "guild_mcp_config",
    "st_preset",
    "novelai_subscription",
)


def warmed_layers() -> list[Layer]:
    """Return the declared layers that warm per guild, in the order a turn reads them."""
    layers = [layer for layer in declared_layers().values() if layer.warm is not None]
    rank = {name: i for i, name in enumerate(TURN_ORDER)}
    return sorted(layers, key=lambda layer: rank.get(layer.name, len(rank)))


def batches(servers: Sequence[tuple[int, int]], size: int) -> list[GuildBatch]:
    """Split (server_id, server_disc_id) pairs into batches of at most `size`."""
    return [
        GuildBatch(
            server_ids=tuple(pk for pk, _ in chunk),
            server_disc_ids=tuple(disc for _, disc in chunk),
        )
        for chunk in (servers[i : i + size] for i in range(0, len(servers), size))
    ]


async def warm_guilds(
    *,
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
    timeout: float,
    batch_size: int = WARM_BATCH,
    layers: Sequence[Layer] | None = None,
    pause: float = 0.0,
) -> WarmReport:
    """Warm every warmable layer (or `layers`) for the shards' guilds within `timeout` s.

    `pause`: seconds to sleep after each layer's batch (a refresh beside turns).
    """
    report = WarmReport()
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            await _warm(report, shard_ids, shard_count, batch_size, layers, pause)
    except TimeoutError:
        report.stopped = f"WORKER_WARM_TIMEOUT_SECONDS={timeout:g} passed"
    except DB_ERRORS as exc:
        report.stopped = f"database error: {type(exc).__name__}: {exc}"
    report.seconds = time.perf_counter() - started
    return report


async def _warm(
    report: WarmReport,
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
    batch_size: int,
    only: Sequence[Layer] | None = None,
    pause: float = 0.0,
) -> None:
    layers = warmed_layers() if only is None else list(only)
    report.entries = dict.fromkeys((layer.name for layer in layers), 0)
    servers = await run_db(servers_repo.shard_servers, shard_ids, shard_count)
    report.guilds = len(servers)
    for batch in batches(servers, batch_size):
        for layer in layers:
            assert layer.warm is not None
            report.entries[layer.name] += await layer.warm(batch)
            if pause:
                await asyncio.sleep(pause)


async def refresh_guilds(
    layers: Sequence[Layer],
    *,
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
    timeout: float = REFRESH_TIMEOUT_SECONDS,
    batch_size: int = REFRESH_BATCH,
    pause: float = REFRESH_PAUSE_SECONDS,
) -> WarmReport:
    """Reload the resident entries of `layers` for the shards' guilds, in bulk.

    The warm-up's queries inside `refreshing()`, in smaller steps with a
    pause after each: the report's entries are the keys refreshed (absent
    ones are not loaded). Bounded and coherent as the warm-up is; a
    database error ends it (what was refreshed stays).
    """
    with refreshing():
        return await warm_guilds(
            shard_ids=shard_ids,
            shard_count=shard_count,
            timeout=timeout,
            batch_size=batch_size,
            layers=layers,
            pause=pause,
        )


#: Maps a turn does not read fresh: a stale-fallback layer's last good values
#: (served only when the database fails) and its error memory.
NOT_REFRESHED = frozenset({"last_good", "errors"})


def shortest_ttl(layer: Layer) -> float | None:
    """Return the shortest TTL (seconds) of the maps a turn reads; None if none expires."""
    maps = registry.get(layer.name).maps()
    ttls = [
        ttl
        for label, one in maps.items()
        if label not in NOT_REFRESHED and (ttl := getattr(one, "ttl", None)) is not None
    ]
    return min(ttls, default=None)


#: The refresh schedule's name for the user rows (`caches.layers.user.refresh_users`).
USERS = "user"


class RefreshSchedule:
    """When each refreshed cache is due: every half of its shortest TTL.

    Named periods: a warmed layer's name (`for_layers`), and USERS for the
    user rows warmed at gateway ready. A name counts from its `start` (when
    it was warmed); `due()` lists the names whose period has passed since,
    `done(names)` restarts their count. A refresh that failed is not `done`:
    it is due again at the next check.
    """

    def __init__(self, periods: dict[str, float], *, clock: Clock = time.monotonic):
        self._clock = clock
        self.periods = dict(periods)
        self._last: dict[str, float] = {}

    @classmethod
    def for_layers(
        cls, layers: Sequence[Layer], *, clock: Clock = time.monotonic
    ) -> RefreshSchedule:
        """Return a schedule of `layers`, each every half of its shortest TTL."""
        periods = {
            layer.name: ttl / 2
            for layer in layers
            if (ttl := shortest_ttl(layer)) is not None
        }
        return cls(periods, clock=clock)

    def add(self, name: str, period: float) -> None:
        """Schedule `name` every `period` seconds (counted from its `start`)."""
        self.periods[name] = period

    def start(self, names: Sequence[str] | None = None) -> None:
        """Count the period of `names` (None: every name) from now: just warmed."""
        now = self._clock()
        for name in self.periods if names is None else names:
            self._last[name] = now

    def due(self) -> list[str]:
        """Return the started names whose period has passed since their last refresh."""
        now = self._clock()
        return [
            name
            for name, period in self.periods.items()
            if name in self._last and now - self._last[name] >= period
        ]

    def done(self, names: Sequence[str]) -> None:
        """Count the period of `names` from now."""
        self.start(names)
