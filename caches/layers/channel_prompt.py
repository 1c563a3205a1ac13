"""Channel system prompt cache (spec 14b): a channel's prompt override, or None.

Keyed by (server_id, channel_disc_id). Channels with no override cache None,
so DM and unconfigured channels cost a single cheap lookup. A database error
answers "no override" and caches nothing (see `_channel_override`, shared
with the channel LLM layer).
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
from tomori.repositories.channels import ChannelPromptRecord

NAME = "channel_prompt"
CAP_SETTING = "CHANNEL_PROMPT_CACHE_MAX_ENTRIES"


def _load_own(server_id: int, channel_disc_id: int) -> ChannelPromptRecord | None:
    return channels_repo.get_channel_prompt_override(
        server_id=server_id, channel_disc_id=channel_disc_id
    )


# Set by _build when the registry is built.
_overrides: ChannelOverrideCache[ChannelPromptRecord] = unbuilt(NAME)
_cache: Any = unbuilt(NAME)


def _build(config: LayerSettings) -> Any:
    """Build the override map from the layer's settings."""
    global _overrides, _cache
    _overrides = ChannelOverrideCache(
        NAME, config, cap_setting=CAP_SETTING, load=_load_own
    )
    _cache = _overrides.cache
    return _cache


async def get_cached_channel_prompt(
    server_id: int, channel_disc_id: int
) -> ChannelPromptRecord | None:
    """Return the channel's {prompt, mode} override, or None (also on a database error)."""
    return await _overrides.get(server_id, channel_disc_id)


def invalidate_channel_prompt_cache(
    server_id: int, channel_disc_id: int | None = None
) -> int:
    """Drop one channel's entry, or every entry of the server; return removals."""
    return _overrides.invalidate(server_id, channel_disc_id)


def invalidate_channel_prompt_server(server_id: int) -> int:
    """Drop every entry of the server; return removals."""
    return _overrides.invalidate(server_id)


def _channel_phrase(s: int, c: int | None = None) -> str:
    return (
        f"channel prompt overrides of server #{s}"
        if c is None
        else f"system prompt override of channel {c} in server #{s}"
    )


LAYER = Layer(
    name=NAME,
    guild=GuildScope("server", "server_id", scope="server"),
    description="Per-channel system prompt overrides ({prompt, mode} or None).",
    policy=EmergencyPolicy.CLEAR,
    key=override_key(
        lambda k: f"system prompt override of channel {k[1]} in server #{k[0]}"
    ),
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
    ops=(
        Operation(
            "server",
            invalidate_channel_prompt_server,
            description="Drop every override entry of one server.",
            phrase=lambda s: f"channel prompt overrides of server #{s}",
        ),
        Operation(
            "channel",
            invalidate_channel_prompt_cache,
            description="Drop one channel's entry (a thread has no entry of its own).",
            phrase=_channel_phrase,
        ),
    ),
    mistaken_for=PopulationSpec(
        "channel prompt overrides", population.channel_prompt_overrides
    ),
)
