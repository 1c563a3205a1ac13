"""Channel LLM override cache: which LLM a channel uses instead of the server's.

Keyed by (server_id, channel_disc_id); a channel with no override is cached as
None. A thread without an override of its own inherits its parent's at read
time. A database error answers "no override" and caches nothing (see
`_channel_override`, shared with the channel prompt layer).
"""

from __future__ import annotations

from caches.layers._channel_override import ChannelOverrideCache
from tomori.repositories import channels as channels_repo

NAME = "channel_llm"


def _load_own(server_id: int, channel_disc_id: int) -> int | None:
    overrides = channels_repo.get_channel_llm_overrides(
        server_id=server_id, channel_disc_ids=[channel_disc_id]
    )
    return overrides.get(channel_disc_id)


_overrides: ChannelOverrideCache[int] = ChannelOverrideCache(
    NAME,
    cap_setting="CHANNEL_LLM_CACHE_MAX_ENTRIES",
    load=_load_own,
    description="Per-channel LLM overrides (None: the channel uses the server's LLM).",
)
_cache = _overrides.cache


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
