"""The message pipeline: what a turn needs, resolved through the cache layers.

pipeline = MessagePipeline(responder=RecordingResponder(), catalogs=catalogs)
pipeline.attach(client)           # the bot's user and discord.py's message cache
await pipeline.take(message)      # what on_message does: bounded, queued (intake)
turn = await pipeline.handle(message)   # one turn: a ResolvedTurn, or None if skipped

Generating a reply is out of scope: each turn ends in a pluggable responder
(`tomori.bot.pipeline.responder`).
"""

from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    emoji_sticker,
    guild_mcp_config,
    layer_names,
    llm,
    markdown_table,
    novelai_subscription,
    persona_sprite,
    persona_sprite_message,
    personal_spotlight,
    short_term_memory,
    st_preset,
    tomori_state,
    user,
    voice_transcript,
)
from tomori.bot.pipeline.core import MessagePipeline, PipelineCounters
from tomori.bot.pipeline.history import HistoryContext
from tomori.bot.pipeline.turn import Outcome, ResolvedTurn

#: The cache layers an OK guild turn reads (when their condition holds), by
#: their declarations: a renamed or removed layer fails this import.
PIPELINE_LAYERS: tuple[str, ...] = layer_names(
    (
        tomori_state.LAYER,
        user.LAYER,
        channel_whitelist.LAYER,
        personal_spotlight.LAYER,
        llm.LAYER,
        channel_llm.LAYER,
        channel_prompt.LAYER,
        persona_sprite.LAYER,
        emoji_sticker.LAYER,
        guild_mcp_config.LAYER,  # when the server and persona allow tools
        st_preset.LAYER,
        novelai_subscription.LAYER,  # when the model is a NovelAI one
        persona_sprite_message.LAYER,  # when the history has webhook messages
        voice_transcript.LAYER,  # when the history window has audio messages
        markdown_table.LAYER,  # when the history window has attachments
        short_term_memory.LAYER,
    )
)

__all__ = [
    "PIPELINE_LAYERS",
    "HistoryContext",
    "MessagePipeline",
    "Outcome",
    "PipelineCounters",
    "ResolvedTurn",
]
