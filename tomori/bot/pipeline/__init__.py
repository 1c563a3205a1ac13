"""The message pipeline: what a turn needs, resolved through the cache layers.

pipeline = MessagePipeline(responder=RecordingResponder(), catalogs=catalogs)
pipeline.attach(client)           # the bot's user and discord.py's message cache
await pipeline.take(message)      # what on_message does: bounded, queued (intake)
turn = await pipeline.handle(message)   # one turn: a ResolvedTurn, or None if skipped

Generating a reply is out of scope: each turn ends in a pluggable responder
(`tomori.bot.pipeline.responder`).
"""

from caches.layers import (
    declared_layers,
    gemini_capability,
    layer_names,
    novelai_capability,
    preset_avatar,
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

#: The cache layers an OK guild turn reads (when their condition holds): every
#: declared layer but those above, so a new layer is one a turn reads until it
#: is listed there (the end-to-end test checks each shows hits).
PIPELINE_LAYERS: tuple[str, ...] = tuple(
    name for name in declared_layers() if name not in NOT_READ_BY_A_TURN
)

__all__ = [
    "NOT_READ_BY_A_TURN",
    "PIPELINE_LAYERS",
    "HistoryContext",
    "MessagePipeline",
    "Outcome",
    "PipelineCounters",
    "ResolvedTurn",
]
