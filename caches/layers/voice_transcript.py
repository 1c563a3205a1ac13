"""Voice transcript cache (spec 12): message id -> STT/TTS transcript text.

History builders read it so older audio messages appear as text. A missing
entry says whether it expired or was never stored (see `_message_keyed`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from caches.layers._feeds import NotFed
from caches.layers._message_keyed import (
    MESSAGE_KEY,
    Lookup,
    LookupStatus,
    MessageKeyedCache,
    build_message_keyed,
)
from caches.layers.declaration import Layer, LayerSettings, unbuilt
from caches.registry import EmergencyPolicy

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


CAP_SETTING = "VOICE_TRANSCRIPT_CACHE_MAX_ENTRIES"
TTL_SETTING = "VOICE_TRANSCRIPT_CACHE_TTL_MINUTES"

_cache: MessageKeyedCache[VoiceTranscript] = unbuilt(NAME)  # set by _build


def _build(config: LayerSettings) -> MessageKeyedCache[VoiceTranscript]:
    """Build the layer's cache from its settings."""
    global _cache
    _cache = build_message_keyed(
        NAME, config, cap_setting=CAP_SETTING, ttl_setting=TTL_SETTING
    )
    return _cache


def voice_transcript_cache() -> MessageKeyedCache[VoiceTranscript]:
    """Return this process's transcript cache (tests, metrics)."""
    return _cache


def cache_voice_transcript(
    message_disc_id: int, text: str, *, source: TranscriptSource
) -> None:
    """Remember the transcript of an audio message."""
    _cache.put(message_disc_id, VoiceTranscript(text=text, source=source))


def get_cached_voice_transcript(message_disc_id: int) -> Lookup[VoiceTranscript]:
    """Return the transcript of a message: found, expired or missing."""
    return _cache.lookup(message_disc_id)


def invalidate_voice_transcript(message_disc_id: int) -> int:
    """Forget one message's transcript (the message was deleted)."""
    return _cache.invalidate(message_disc_id)


LAYER = Layer(
    name=NAME,
    description="Voice transcripts (message id -> STT/TTS text) for audio in history.",
    policy=EmergencyPolicy.CLEAR,
    invalidatable=False,
    key=MESSAGE_KEY,
    not_fed=NotFed.TURN_WRITTEN,
    build=_build,
    settings=(CAP_SETTING, TTL_SETTING),
)

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
