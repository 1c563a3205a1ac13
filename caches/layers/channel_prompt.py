"""Channel system prompt cache (spec 14b): a channel's prompt override, or None.

Keyed by (server_id, channel_disc_id). Channels with no override cache None,
so DM and unconfigured channels cost a single cheap lookup. A database error
answers "no override" and caches nothing (see `_channel_override`, shared
with the channel LLM layer).
"""

from __future__ import annotations

from caches.layers._channel_override import ChannelOverrideCache
from tomori.repositories import channels as channels_repo
from tomori.repositories.channels import ChannelPromptRecord

NAME = "channel_prompt"


def _load_own(server_id: int, channel_disc_id: int) -> ChannelPromptRecord | None:
    return channels_repo.get_channel_prompt_override(
        server_id=server_id, channel_disc_id=channel_disc_id
    )


_overrides: ChannelOverrideCache[ChannelPromptRecord] = ChannelOverrideCache(
    NAME,
    cap_setting="CHANNEL_PROMPT_CACHE_MAX_ENTRIES",
    load=_load_own,
    description="Per-channel system prompt overrides ({prompt, mode} or None).",
)
_cache = _overrides.cache


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
