"""The message pipeline: what a turn needs, resolved through the cache layers.

pipeline = MessagePipeline(responder=RecordingResponder(), catalogs=catalogs)
pipeline.attach(client)           # the bot's user and discord.py's message cache
turn = await pipeline.handle(message)   # a ResolvedTurn, or None when skipped

Generating a reply is out of scope: each turn ends in a pluggable responder
(`tomori.bot.pipeline.responder`).
"""

from tomori.bot.pipeline.core import MessagePipeline, PipelineCounters
from tomori.bot.pipeline.history import HistoryContext, history_window
from tomori.bot.pipeline.turn import Outcome, ResolvedTurn

#: The cache layers an OK guild turn reads (when their condition holds).
PIPELINE_LAYERS = (
    "tomori_state",
    "user",
    "channel_whitelist",
    "personal_spotlight",
    "llm",
    "channel_llm",
    "channel_prompt",
    "persona_sprite",
    "emoji_sticker",
    "guild_mcp_config",  # when the server and persona allow tools
    "st_preset",
    "novelai_subscription",  # when the model is a NovelAI one
    "persona_sprite_message",  # when the history window has webhook messages
    "voice_transcript",  # when the history window has audio messages
    "markdown_table",  # when the history window has attachments
    "short_term_memory",
)

__all__ = [
    "PIPELINE_LAYERS",
    "HistoryContext",
    "MessagePipeline",
    "Outcome",
    "PipelineCounters",
    "ResolvedTurn",
    "history_window",
]
