"""Voice transcript cache (spec 12): message id -> STT/TTS transcript text.

History builders read it so older audio messages appear as text. A missing
entry says whether it expired or was never stored (see `_message_keyed`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from caches.layers._message_keyed import Lookup, LookupStatus, MessageKeyedLayer

NAME = "voice_transcript"


class TranscriptSource(enum.Enum):
    """Where a transcript came from."""

    STT = "stt"  # a user's voice message, transcribed
    TTS = "tts"  # the bot's own spoken reply, from its text


@dataclass(frozen=True, slots=True)
class VoiceTranscript:
    """The transcript of one audio message."""

    text: str
    source: TranscriptSource


_layer: MessageKeyedLayer[VoiceTranscript] = MessageKeyedLayer(
    NAME,
    cap_setting="VOICE_TRANSCRIPT_CACHE_MAX_ENTRIES",
    ttl_setting="VOICE_TRANSCRIPT_CACHE_TTL_MINUTES",
    description="Voice transcripts (message id -> STT/TTS text) for audio in history.",
)

#: Return this process's transcript cache (tests, metrics).
voice_transcript_cache = _layer.built
#: Return the transcript of a message: found, expired or missing.
get_cached_voice_transcript = _layer.lookup
#: Forget one message's transcript (the message was deleted).
invalidate_voice_transcript = _layer.invalidate


def cache_voice_transcript(
    message_disc_id: int, text: str, *, source: TranscriptSource
) -> None:
    """Remember the transcript of an audio message."""
    _layer.put(message_disc_id, VoiceTranscript(text=text, source=source))


LAYER = _layer.layer

__all__ = [
    "LAYER",
    "Lookup",
    "LookupStatus",
    "TranscriptSource",
    "VoiceTranscript",
    "cache_voice_transcript",
    "get_cached_voice_transcript",
    "invalidate_voice_transcript",
    "voice_transcript_cache",
]
