"""Channel system prompt cache (spec 14b): a channel's prompt override, or None.

Keyed by (server_id, channel_disc_id), behind a per-server gate listing the
channels that have an override: DM and unconfigured channels answer None from
the gate, with no entry of their own. A database error answers "no override"
and caches nothing (see `_channel_override`, shared with the channel LLM layer).
"""

from __future__ import annotations

from caches.layers._channel_override import OverrideLayer, OverrideWords
from caches.layers._feeds import Feed
from caches.layers.declaration import PopulationSpec
from tomori.domain.repositories import channels as channels_repo
from tomori.domain.repositories import population
from tomori.domain.repositories.channels import ChannelPromptRecord

NAME = "channel_prompt"
CAP_SETTING = "CHANNEL_PROMPT_CACHE_MAX_ENTRIES"


def _load_own(server_id: int, channel_disc_id: int) -> ChannelPromptRecord | None:
    return channels_repo.get_channel_prompt_override(
        server_id=server_id, channel_disc_id=channel_disc_id
    )


_layer: OverrideLayer[ChannelPromptRecord] = OverrideLayer(
    NAME,
    cap_setting=CAP_SETTING,
    load=_load_own,
    load_gates=lambda ids: channels_repo.channels_with_prompt_override(ids),
    words=OverrideWords(
        description="Per-channel system prompt overrides ({prompt, mode} or None).",
        key=lambda k: f"system prompt override of channel {k[1]} in server #{k[0]}",
        server=lambda s: f"channel prompt overrides of server #{s}",
        channel=lambda s, c: f"system prompt override of channel {c} in server #{s}",
        channel_note="Drop the server's gate and one channel's entry (a thread has "
        "no entry of its own).",
        population=PopulationSpec(
            "channel prompt overrides", population.channel_prompt_overrides
        ),
    ),
    feeds=(
        Feed(
            "tomori.ChannelPromptOverride",
            "channel",
            ("server_id", "channel_disc_id"),
        ),
    ),
)


async def get_cached_channel_prompt(
    server_id: int, channel_disc_id: int
) -> ChannelPromptRecord | None:
    """Return the channel's {prompt, mode} override, or None (also on a database error)."""
    return await _layer.get(server_id, channel_disc_id)


#: Drop the server's gate and one channel's entry (or all the server's); return removals.
invalidate_channel_prompt_cache = _layer.invalidate
#: Drop the server's gate and every entry of the server; return removals.
invalidate_channel_prompt_server = _layer.invalidate_server

LAYER = _layer.layer
