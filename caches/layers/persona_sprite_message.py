"""Persona sprite message cache (spec 15b): which sprite a sent message carried.

Keyed by message_disc_id; a message with no sprite mapping is cached as None
(most persona webhook messages are plain sends). Entries are immutable, so
nothing invalidates them and the TTL only bounds memory. Context builds prime
the cache with one batched query; sends seed it directly. A transient database
error seeds nothing, so real sprite messages are not masked for a TTL.
Database retention pruning rides the write path, at most once per
PRUNE_INTERVAL_SECONDS.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import Error as DatabaseError
from django.utils import timezone

from caches.core import MISSING, Clock, DoNotCache
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import NotFed
from caches.layers._maps import OneMap
from caches.layers._support import cached, parse_int, run_db
from caches.layers.declaration import (
    KeyShape,
    Layer,
    PopulationSpec,
)
from caches.registry import EmergencyPolicy
from tomori.domain.knobs import knobs
from tomori.domain.repositories import population
from tomori.domain.repositories import sprites as sprites_repo
from tomori.domain.repositories.sprites import SpriteMessageRecord

logger = logging.getLogger(__name__)

NAME = "persona_sprite_message"
PRUNE_INTERVAL_SECONDS = 6 * 3600.0

CAP_SETTING = "PERSONA_SPRITE_MESSAGE_CACHE_MAX_ENTRIES"
TTL_SETTING = "PERSONA_SPRITE_MESSAGE_CACHE_TTL_MINUTES"

_layer: OneMap[int, Any] = OneMap(NAME, cap=CAP_SETTING, ttl=TTL_SETTING)


class _RetentionPruner:
    """Runs the database retention prune at most once per interval."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.last_run: float | None = None

    def claim(self) -> bool:
        """Return True (and start a new interval) if a prune is due now."""
        now = self.clock()
        if self.last_run is not None and now - self.last_run < PRUNE_INTERVAL_SECONDS:
            return False
        self.last_run = now
        return True


_pruner = _RetentionPruner()


def set_retention_clock(clock: Clock) -> None:
    """Read prune intervals from `clock` and forget the last prune (tests)."""
    _pruner.clock = clock
    _pruner.last_run = None


async def _load_one(
    message_disc_id: int,
) -> SpriteMessageRecord | None | DoNotCache[None]:
    try:
        found = await run_db(sprites_repo.get_sprite_messages, [message_disc_id])
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
        return DoNotCache(None)
    return found.get(message_disc_id)


async def get_cached_persona_sprite_message(
    message_disc_id: int,
) -> SpriteMessageRecord | None:
    """Return the message's sprite mapping, or None (also on a database error)."""
    record = cached(_layer.cache, message_disc_id)  # the hit path builds no closure
    if record is not MISSING:
        return record  # type: ignore[no-any-return]
    return await _layer.cache.get_or_load(  # type: ignore[no-any-return]
        message_disc_id, lambda: _load_one(message_disc_id)
    )


def peek_persona_sprite_message(message_disc_id: int) -> SpriteMessageRecord | None:
    """Return the cached mapping without touching the database (None if not cached)."""
    value = _layer.cache.get(message_disc_id)
    return None if value is MISSING else value


async def prime_persona_sprite_message_records(message_disc_ids: Iterable[int]) -> int:
    """Load every uncached id in one query and seed rows and negatives; return seeded."""
    missing = list(dict.fromkeys(i for i in message_disc_ids if i not in _layer.cache))
    if not missing:
        return 0
    try:
        found = await run_db(sprites_repo.get_sprite_messages, missing)
    except DB_ERRORS as exc:
        database_failed(NAME, exc)
        return 0
    for message_disc_id in missing:
        _layer.cache.set(message_disc_id, found.get(message_disc_id))
    return len(missing)


def _write(
    message_disc_id: int, persona_id: int, sprite_name: str, channel_disc_id: int
) -> SpriteMessageRecord:
    record = sprites_repo.sprite_message_create(
        message_disc_id=message_disc_id,
        persona_id=persona_id,
        sprite_name=sprite_name,
        channel_disc_id=channel_disc_id,
    )
    if _pruner.claim():
        _prune()
    return record


def _prune() -> None:
    days = knobs().PERSONA_SPRITE_MESSAGE_RETENTION_DAYS
    try:
        deleted = sprites_repo.prune_sprite_messages(
            older_than=timezone.now() - timedelta(days=days)
        )
    except DatabaseError as exc:
        logger.warning("persona_sprite_message: retention prune failed: %s", exc)
        return
    if deleted:
        logger.info(
            "persona_sprite_message: pruned %d rows older than %d days", deleted, days
        )


async def record_persona_sprite_message(
    *, message_disc_id: int, persona_id: int, sprite_name: str, channel_disc_id: int
) -> SpriteMessageRecord:
    """Store which sprite a sent message carried and seed the cache with it."""
    record = await run_db(
        _write, message_disc_id, persona_id, sprite_name, channel_disc_id
    )
    _layer.cache.set(message_disc_id, record)
    return record


LAYER = Layer(
    name=NAME,
    description="Sprite mapping per sent message (None: no sprite); immutable.",
    policy=EmergencyPolicy.CLEAR,
    invalidatable=False,
    key=KeyShape(help="message_disc_id (the Discord message id)", parse=parse_int),
    not_fed=NotFed.IMMUTABLE,
    build=_layer.build,
    settings=(CAP_SETTING, TTL_SETTING),
    mistaken_for=PopulationSpec("sprite messages stored", population.sprite_messages),
)
