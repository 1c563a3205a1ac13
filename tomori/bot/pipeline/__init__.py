"""The message pipeline: what a turn needs, resolved through the cache layers.

pipeline = MessagePipeline(responder=RecordingResponder(), catalogs=catalogs)
pipeline.attach(client)           # the bot's user and discord.py's message cache
await pipeline.take(message)      # what on_message does: bounded, queued (intake)
turn = await pipeline.handle(message)   # one turn: a ResolvedTurn, or None if skipped

Generating a reply is out of scope: each turn ends in a pluggable responder
(`tomori.bot.pipeline.responder`).
"""

from caches.layers import (
    channel_whitelist,
    declared_layers,
    gemini_capability,
    layer_names,
    novelai_capability,
    preset_avatar,
    tomori_state,
    user,
    webhook,
    webhook_identity,
)
from tomori.bot.pipeline.core import MessagePipeline, PipelineCounters
from tomori.bot.pipeline.history import HistoryContext
from tomori.bot.pipeline.turn import Outcome, ResolvedTurn

#: The declared layers no turn reads (bound to their declarations: a renamed
#: or removed layer fails this import): the webhook layers serve the sending
#: of a reply, the capability maps the responder's model limits, the preset
#: avatars the admin and the sending.
NOT_READ_BY_A_TURN: tuple[str, ...] = layer_names(
    (
        gemini_capability.LAYER,
        novelai_capability.LAYER,
        preset_avatar.LAYER,
        webhook.LAYER,
        webhook_identity.LAYER,
    )
)

#: The cache layers an OK guild turn that answers reads (when their condition
#: holds): every declared layer but those above, so a new layer is one a turn
#: reads until it is listed there (the end-to-end test checks each shows hits).
PIPELINE_LAYERS: tuple[str, ...] = tuple(
    name for name in declared_layers() if name not in NOT_READ_BY_A_TURN
)

#: The layers a quiet guild turn (one that does not answer: the bot is not
#: mentioned) reads: the gate alone (state; the user row's blacklist; the
#: whitelist). It chooses no persona and captures nothing in short-term
#: memory, which is captured when the bot answers; the rest of
#: PIPELINE_LAYERS only an answer needs.
QUIET_TURN_LAYERS: tuple[str, ...] = layer_names(
    (
        tomori_state.LAYER,
        user.LAYER,
        channel_whitelist.LAYER,
    )
)

__all__ = [
    "NOT_READ_BY_A_TURN",
    "PIPELINE_LAYERS",
    "QUIET_TURN_LAYERS",
    "HistoryContext",
    "MessagePipeline",
    "Outcome",
    "PipelineCounters",
    "ResolvedTurn",
]
