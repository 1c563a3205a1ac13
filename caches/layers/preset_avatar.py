"""Preset avatar cache (spec 11): preset personas' PNG avatars, warmed at start.

Keyed by preset_id; a preset without a valid avatar (no path, missing file,
not a PNG, larger than PRESET_AVATAR_MAX_BYTES) is cached as None. Entries do
not expire. After a clear (an operator's, or a preset row change) an entry is
reloaded on its next `get_preset_avatar`, so the cache re-warms lazily.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from caches.core import MISSING
from caches.db_outage import DB_ERRORS, database_failed
from caches.layers._feeds import Feed
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
from tomori.domain.repositories import presets as presets_repo
from tomori.domain.repositories.presets import PresetPersonaRecord

logger = logging.getLogger(__name__)

NAME = "preset_avatar"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class PresetAvatar:
    """A preset persona's avatar image (PNG bytes)."""

    preset_id: int
    name: str
    png: bytes


CAP_SETTING = "PRESET_AVATAR_CACHE_MAX_ENTRIES"

_layer: OneMap[int, PresetAvatar | None] = OneMap(NAME, cap=CAP_SETTING, ttl=None)


def avatars_dir() -> Path:
    """Return the directory relative avatar paths are read from (var/avatars)."""
    return Path(settings.VAR_DIR) / "avatars"


def resolve_avatar_path(avatar_path: str) -> Path | None:
    """Return the file an avatar path names; None if empty or escaping var/avatars."""
    if not avatar_path:
        return None
    path = Path(avatar_path)
    if path.is_absolute():
        return path
    base = avatars_dir().resolve()
    resolved = (base / path).resolve()
    return resolved if resolved.is_relative_to(base) else None


def is_png(data: bytes) -> bool:
    """Tell whether `data` starts like a PNG (signature, then the IHDR chunk)."""
    return data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR"


def read_png(path: Path, *, max_bytes: int) -> bytes | None:
    """Read a PNG file of at most `max_bytes`; None (logged) if it is not one."""
    try:
        if path.stat().st_size > max_bytes:
            logger.warning("preset_avatar: %s is over %d bytes", path, max_bytes)
            return None
        data = path.read_bytes()
    except OSError as exc:
        logger.warning("preset_avatar: cannot read %s: %s", path, exc)
        return None
    if len(data) > max_bytes or not is_png(data):
        logger.warning("preset_avatar: %s is not a PNG within the size limit", path)
        return None
    return data


def _avatar_for(preset: PresetPersonaRecord | None) -> PresetAvatar | None:
    if preset is None or not preset.is_active:
        return None
    path = resolve_avatar_path(preset.avatar_path)
    if path is None:
        return None
    png = read_png(path, max_bytes=knobs().PRESET_AVATAR_MAX_BYTES)
    return PresetAvatar(preset.id, preset.name, png) if png is not None else None


async def initialize_preset_avatar_cache() -> int:
    """Warm the cache from the active preset rows; return the entries installed.

    One entry per active preset, as the dashboard's size counts them: a
    preset without a valid avatar is cached as None (`count_valid_avatars`).
    """
    invalidations = _layer.cache.stats()["invalidations"]
    try:
        presets = await run_db(presets_repo.list_preset_personas)
    except DB_ERRORS as exc:  # keep the cache
        database_failed(NAME, exc)
        return 0
    avatars = await asyncio.to_thread(lambda: [_avatar_for(p) for p in presets])
    if _layer.cache.stats()["invalidations"] != invalidations:
        # A preset changed while we read: these rows may be old. Install
        # nothing; get_preset_avatar() loads each one fresh on use.
        logger.info("preset_avatar: warm overlapped an invalidation, not installed")
        return 0
    wanted = {p.id for p in presets}
    _layer.cache.invalidate_where(lambda key: key not in wanted)
    for preset, avatar in zip(presets, avatars, strict=True):
        _layer.cache.set(preset.id, avatar)
    return len(presets)


def count_valid_avatars() -> int:
    """Return how many cached presets have a valid PNG avatar (not None)."""
    return sum(avatar is not None for _, avatar in _layer.cache.items())


def get_cached_preset_avatar(preset_id: int) -> PresetAvatar | None:
    """Return the cached avatar (None if absent, invalid or not loaded yet)."""
    value = _layer.cache.get(preset_id)
    return None if value is MISSING else value


async def _load_one(preset_id: int) -> PresetAvatar | None:
    preset = await run_db(presets_repo.get_preset_persona, preset_id)
    return await asyncio.to_thread(_avatar_for, preset)


async def get_preset_avatar(preset_id: int) -> PresetAvatar | None:
    """Return the preset's avatar, loading it if the cache lost it (None: no valid avatar)."""
    avatar = cached(_layer.cache, preset_id)  # the hit path builds no closure
    if avatar is not MISSING:
        return avatar  # type: ignore[no-any-return]
    return await _layer.cache.get_or_load(preset_id, lambda: _load_one(preset_id))  # type: ignore[no-any-return]


def invalidate_preset_avatar_cache(preset_id: int) -> int:
    """Drop one preset's avatar (reloaded on its next read); return removals."""
    return _layer.cache.invalidate(preset_id)


LAYER = Layer(
    name=NAME,
    description="Preset persona PNG avatars, warmed at start; reloaded lazily.",
    policy=EmergencyPolicy.CLEAR,
    key=KeyShape(
        help="preset_id",
        parse=parse_int,
        phrase=lambda i: f"avatar of preset persona #{i}",
    ),
    feeds=(Feed("tomori.PresetPersona", "key", ("id",)),),
    build=_layer.build,
    settings=(CAP_SETTING,),
    mistaken_for=PopulationSpec("preset personas", population.preset_personas),
)
