"""Channel LLM override cache: which LLM a channel uses instead of the server's.

Keyed by (server_id, channel_disc_id), behind a per-server gate listing the
channels that have an override: any other channel answers None with no entry
of its own. A thread without an override of its own inherits its parent's at
read time. A database error answers "no override" and caches nothing (see
`_channel_override`, shared with the channel prompt layer).
"""

from __future__ import annotations

from caches.layers._channel_override import OverrideLayer, OverrideWords
from caches.layers._feeds import Feed
from caches.layers.declaration import PopulationSpec
from tomori.domain.repositories import channels as channels_repo
from tomori.domain.repositories import population

NAME = "channel_llm"
CAP_SETTING = "CHANNEL_LLM_CACHE_MAX_ENTRIES"


def _load_own(server_id: int, channel_disc_id: int) -> int | None:
    overrides = channels_repo.get_channel_llm_overrides(
        server_id=server_id, channel_disc_ids=[channel_disc_id]
    )
    return overrides.get(channel_disc_id)


_layer: OverrideLayer[int] = OverrideLayer(
    NAME,
    cap_setting=CAP_SETTING,
    load=_load_own,
    load_gates=lambda ids: channels_repo.channels_with_llm_override(ids),
    words=OverrideWords(
        description="Per-channel LLM overrides (None: the channel uses the server's LLM).",
        key=lambda k: f"LLM override of channel {k[1]} in server #{k[0]}",
        server=lambda s: f"channel LLM overrides of server #{s}",
        channel=lambda s, c: (
            f"LLM override of channel {c} and its threads in server #{s}"
        ),
        channel_note="Drop the server's gate and one channel's entry (its threads "
        "inherit at read time).",
        population=PopulationSpec(
            "channel LLM overrides", population.channel_llm_overrides
        ),
    ),
    feeds=(
        Feed("tomori.ChannelLlmOverride", "channel", ("server_id", "channel_disc_id")),
    ),
)


#: Return the llm_id the channel (or a thread's parent) overrides with, or None
#: (also on a database error). The layer's own read: a hit is one coroutine.
get_cached_channel_llm = _layer.get

#: Drop the server's gate and one channel's entry (or all the server's); return removals.
invalidate_channel_llm_cache = _layer.invalidate
#: Drop the server's gate and every entry of the server; return removals.
invalidate_channel_llm_server = _layer.invalidate_server

LAYER = _layer.layer
