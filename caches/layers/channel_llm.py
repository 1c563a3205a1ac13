"""Channel LLM override cache: which LLM a channel uses instead of the server's.

Keyed by (server_id, channel_disc_id); a channel with no override is cached as
None. A thread without an override of its own inherits its parent's at read
time. A database error answers "no override" and caches nothing (see
`_channel_override`, shared with the channel prompt layer).
"""

from __future__ import annotations

from typing import Any

from caches.layers._channel_override import (
    TTL_SETTING,
    ChannelOverrideCache,
    override_key,
)
from caches.layers.declaration import (
    GuildScope,
    Layer,
    LayerSettings,
    Operation,
    PopulationSpec,
    unbuilt,
)
from caches.registry import EmergencyPolicy
from tomori.repositories import channels as channels_repo
from tomori.repositories import population

NAME = "channel_llm"
CAP_SETTING = "CHANNEL_LLM_CACHE_MAX_ENTRIES"


def _load_own(server_id: int, channel_disc_id: int) -> int | None:
    overrides = channels_repo.get_channel_llm_overrides(
        server_id=server_id, channel_disc_ids=[channel_disc_id]
    )
    return overrides.get(channel_disc_id)


# Set by _build when the registry is built.
_overrides: ChannelOverrideCache[int] = unbuilt(NAME)
_cache: Any = unbuilt(NAME)


def _build(config: LayerSettings) -> Any:
    """Build the override map from the layer's settings."""
    global _overrides, _cache
    _overrides = ChannelOverrideCache(
        NAME, config, cap_setting=CAP_SETTING, load=_load_own
    )
    _cache = _overrides.cache
    return _cache


async def get_cached_channel_llm(
    server_id: int, channel_disc_id: int, *, parent_disc_id: int | None = None
) -> int | None:
    """Return the llm_id the channel (or a thread's parent) overrides with, or None."""
    return await _overrides.get(
        server_id, channel_disc_id, parent_disc_id=parent_disc_id
    )


def invalidate_channel_llm_cache(
    server_id: int, channel_disc_id: int | None = None
) -> int:
    """Drop one channel's entry, or every entry of the server; return removals."""
    return _overrides.invalidate(server_id, channel_disc_id)


def invalidate_channel_llm_server(server_id: int) -> int:
    """Drop every entry of the server; return removals."""
    return _overrides.invalidate(server_id)


def _channel_phrase(s: int, c: int | None = None) -> str:
    return (
        f"channel LLM overrides of server #{s}"
        if c is None
        else f"LLM override of channel {c} and its threads in server #{s}"
    )


LAYER = Layer(
    name=NAME,
    guild=GuildScope("server", "server_id", scope="server"),
    description="Per-channel LLM overrides (None: the channel uses the server's LLM).",
    policy=EmergencyPolicy.CLEAR,
    key=override_key(lambda k: f"LLM override of channel {k[1]} in server #{k[0]}"),
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
    ops=(
        Operation(
            "server",
            invalidate_channel_llm_server,
            description="Drop every override entry of one server.",
            phrase=lambda s: f"channel LLM overrides of server #{s}",
        ),
        Operation(
            "channel",
            invalidate_channel_llm_cache,
            description="Drop one channel's entry (its threads inherit at read time).",
            phrase=_channel_phrase,
        ),
    ),
    mistaken_for=PopulationSpec(
        "channel LLM overrides", population.channel_llm_overrides
    ),
)
