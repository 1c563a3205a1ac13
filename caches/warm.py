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
scenario ten minutes after a start: 0.25 loads and 0.3 round trips a
message more, a turn p99 of 1 s; a full shard's 27,000 entries at once).
So the worker reloads each warmed layer's entries every half of its
shortest TTL, a slice of the guilds at each 15 s check so that the load is
spread over the period (`RefreshSchedule`): the same bulk queries inside
`caches.core.refreshing()`, which reload only the keys still resident, each
with a fresh deadline, and add none. A value is never older than its TTL
(it is younger), nothing is stored past a cap, and an emergency clear stays
cleared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field

from caches.core import refreshing
from caches.database import run_db
from caches.db_outage import DB_ERRORS
from caches.layers import declared_layers
from caches.layers.declaration import GuildBatch, Layer
from caches.registry import registry
from tomori.domain.repositories import servers as servers_repo

logger = logging.getLogger(__name__)

#: Servers per batch: every layer's queries take this many ids at most.
WARM_BATCH = 1000


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
) -> WarmReport:
    """Warm every warmable layer for the shards' guilds within `timeout` seconds."""
    report = WarmReport()
    return await _bounded(
        report,
        _warm(report, shard_ids, shard_count, batch_size),
        timeout=timeout,
        timed_out=f"WORKER_WARM_TIMEOUT_SECONDS={timeout:g} passed",
    )


async def _bounded(
    report: WarmReport, work: Awaitable[None], *, timeout: float, timed_out: str
) -> WarmReport:
    """Run `work` within `timeout` s; a timeout or database error ends it, in `report`."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            await work
    except TimeoutError:
        report.stopped = timed_out
    except DB_ERRORS as exc:
        report.stopped = f"database error: {type(exc).__name__}: {exc}"
    report.seconds = time.perf_counter() - started
    return report


async def _servers(
    report: WarmReport,
    layers: Sequence[Layer],
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
) -> list[tuple[int, int]]:
    """Return the shards' (server_id, server_disc_id); count them and `layers` in `report`."""
    report.entries = dict.fromkeys((layer.name for layer in layers), 0)
    servers = await run_db(servers_repo.shard_servers, shard_ids, shard_count)
    report.guilds = len(servers)
    return servers  # type: ignore[no-any-return]


async def _warm(
    report: WarmReport,
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
    batch_size: int,
) -> None:
    layers = warmed_layers()
    servers = await _servers(report, layers, shard_ids, shard_count)
    for batch in batches(servers, batch_size):
        for layer in layers:
            assert layer.warm is not None
            report.entries[layer.name] += await layer.warm(batch)


#: How often the worker refreshes a slice of each warmed cache (its timer).
REFRESH_CHECK_SECONDS = 15.0
#: A refresh step's own bound (a database call has its own deadline too).
REFRESH_TIMEOUT_SECONDS = 60.0


async def refresh_guilds(
    due: Mapping[str, tuple[int, int]],
    *,
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
    timeout: float = REFRESH_TIMEOUT_SECONDS,
    batch_size: int = WARM_BATCH,
) -> WarmReport:
    """Reload the resident entries of one slice of guilds per layer, in bulk.

    `due` maps a warmed layer's name to (slice, slices): the shards' guilds
    `servers[slice::slices]` (in `shard_servers` order). The warm-up's
    queries inside `refreshing()`: the report's entries are the keys
    refreshed (absent ones are not loaded). Bounded and coherent as the
    warm-up is; a database error ends it (what was refreshed stays).
    """
    report = WarmReport()
    return await _bounded(
        report,
        _refresh(report, due, shard_ids, shard_count, batch_size),
        timeout=timeout,
        timed_out=f"{timeout:g} s passed",
    )


async def _refresh(
    report: WarmReport,
    due: Mapping[str, tuple[int, int]],
    shard_ids: Sequence[int] | None,
    shard_count: int | None,
    batch_size: int,
) -> None:
    layers = [layer for layer in warmed_layers() if layer.name in due]
    servers = await _servers(report, layers, shard_ids, shard_count)
    with refreshing():
        for layer in layers:
            assert layer.warm is not None
            part, parts = due[layer.name]
            for batch in batches(servers[part::parts], batch_size):
                report.entries[layer.name] += await layer.warm(batch)


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
    """Which slice of each refreshed cache is due at each of the worker's checks.

    A name (a warmed layer's, or USERS for the user rows warmed at ready)
    has a period, half of its shortest TTL, cut into `slices` of one check
    (REFRESH_CHECK_SECONDS) each: every check refreshes one slice of its
    guilds (or users), the next check the next one, so each slice comes
    round once a period and a full shard's refresh is spread over the
    period instead of landing at once (which backed up its turns). From its
    `start` (its warm-up), a name's slices are refreshed at checks 1, 2, ...:
    each entry is reloaded at most one period after it was stored, so it
    never reaches its TTL. No clock: the checks are the timer's ticks.
    """

    def __init__(
        self, periods: dict[str, float], *, check_seconds: float = REFRESH_CHECK_SECONDS
    ) -> None:
        self.check_seconds = check_seconds
        self.periods = dict(periods)
        self._ticks: dict[str, int] = {}  # checks since each started name's start

    @classmethod
    def for_layers(
        cls, layers: Sequence[Layer], *, check_seconds: float = REFRESH_CHECK_SECONDS
    ) -> RefreshSchedule:
        """Return a schedule of `layers`, each every half of its shortest TTL."""
        periods = {
            layer.name: ttl / 2
            for layer in layers
            if (ttl := shortest_ttl(layer)) is not None
        }
        return cls(periods, check_seconds=check_seconds)

    def add(self, name: str, period: float) -> None:
        """Schedule `name` every `period` seconds (counted from its `start`)."""
        self.periods[name] = period

    def slices(self, name: str) -> int:
        """Return how many checks (slices) one period of `name` is cut into."""
        return max(1, int(self.periods[name] // self.check_seconds))

    def start(self, names: Sequence[str] | None = None) -> None:
        """Start counting the checks of `names` (None: every name): just warmed."""
        for name in self.periods if names is None else names:
            self._ticks[name] = 0

    def tick(self) -> dict[str, tuple[int, int]]:
        """Count one check; return {name: (slice, slices)} of every started name."""
        due = {}
        for name, ticks in self._ticks.items():
            slices = self.slices(name)
            due[name] = (ticks % slices, slices)
            self._ticks[name] = ticks + 1
        return due
