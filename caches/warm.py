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
store (tests/caches/test_warm.py compares them, layer by layer).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from caches.database import run_db
from caches.db_outage import DB_ERRORS
from caches.layers import declared_layers
from caches.layers.declaration import GuildBatch, Layer
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
    started = time.perf_counter()
    try:
        async with asyncio.timeout(timeout):
            await _warm(report, shard_ids, shard_count, batch_size)
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
) -> None:
    layers = warmed_layers()
    report.entries = dict.fromkeys((layer.name for layer in layers), 0)
    servers = await run_db(servers_repo.shard_servers, shard_ids, shard_count)
    report.guilds = len(servers)
    for batch in batches(servers, batch_size):
        for layer in layers:
            assert layer.warm is not None
            report.entries[layer.name] += await layer.warm(batch)
