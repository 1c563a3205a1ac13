"""Voice transcript and markdown table caches: found, expired, missing; the button check."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from caches.core import FakeClock
from caches.layers._message_keyed import LookupStatus, MessageKeyedCache, SeenIds
from caches.layers.markdown_table import (
    cache_markdown_table,
    get_cached_markdown_table,
    invalidate_markdown_table,
    markdown_button_timeout_seconds,
    markdown_table_cache,
)
from caches.layers.voice_transcript import (
    TranscriptSource,
    VoiceTranscript,
    cache_voice_transcript,
    get_cached_voice_transcript,
)
from caches.registry import registry
from tomori.domain.knobs import knobs, read_knobs

TABLE = "| a | b |\n|---|---|\n| 1 | 2 |"


def test_markdown_table_is_found_after_caching() -> None:
    cache_markdown_table(1, TABLE)
    lookup = get_cached_markdown_table(1)
    assert lookup.found
    assert lookup.value == TABLE


def test_never_cached_message_is_missing_not_expired() -> None:
    assert get_cached_markdown_table(404).status is LookupStatus.MISSING
    assert get_cached_voice_transcript(404).status is LookupStatus.MISSING


def test_markdown_table_expires_after_its_ttl(clock: FakeClock) -> None:
    cache_markdown_table(2, TABLE)
    clock.advance(knobs().MARKDOWN_TABLE_CACHE_TTL_MINUTES * 60 - 1)
    assert get_cached_markdown_table(2).found
    clock.advance(1)
    lookup = get_cached_markdown_table(2)
    assert lookup.status is LookupStatus.EXPIRED
    assert lookup.value is None


def test_expired_table_text_is_not_kept_in_memory(clock: FakeClock) -> None:
    cache_markdown_table(3, TABLE)
    clock.advance(knobs().MARKDOWN_TABLE_CACHE_TTL_MINUTES * 60)
    assert len(registry.get("markdown_table")) == 0
    assert 3 in markdown_table_cache().seen
    assert registry.stats()["markdown_table"]["tombstones"] >= 1


def test_cleared_table_answers_expired() -> None:
    cache_markdown_table(4, TABLE)
    registry.clear("markdown_table")
    assert get_cached_markdown_table(4).status is LookupStatus.EXPIRED
    cache_markdown_table(5, TABLE)
    assert invalidate_markdown_table(5) == 1
    assert get_cached_markdown_table(5).status is LookupStatus.EXPIRED


def test_voice_transcript_keeps_text_and_source(clock: FakeClock) -> None:
    cache_voice_transcript(10, "hello there", source=TranscriptSource.STT)
    cache_voice_transcript(11, "hi!", source=TranscriptSource.TTS)
    assert get_cached_voice_transcript(10).value == VoiceTranscript(
        "hello there", TranscriptSource.STT
    )
    assert get_cached_voice_transcript(11).value.source is TranscriptSource.TTS
    clock.advance(knobs().VOICE_TRANSCRIPT_CACHE_TTL_MINUTES * 60)
    assert get_cached_voice_transcript(10).status is LookupStatus.EXPIRED


def test_cap_evicts_oldest_and_evicted_answers_expired() -> None:
    cache: MessageKeyedCache[str] = MessageKeyedCache("t", maxsize=3, ttl=60)
    for message_id in range(1, 5):
        cache.put(message_id, f"m{message_id}")
    assert len(cache) == 3
    assert cache.lookup(1).status is LookupStatus.EXPIRED
    assert cache.lookup(4).value == "m4"


def test_tombstones_are_bounded() -> None:
    cache: MessageKeyedCache[str] = MessageKeyedCache(
        "t", maxsize=2, ttl=60, seen_factor=2
    )
    for message_id in range(1, 11):
        cache.put(message_id, "x")
    assert len(cache.seen) == 4
    assert cache.lookup(1).status is LookupStatus.MISSING
    assert cache.lookup(7).status is LookupStatus.EXPIRED


def test_seen_ids_keep_the_first_place_of_a_repeated_id() -> None:
    seen = SeenIds(2)
    seen.add(1)
    seen.add(1)
    seen.add(2)
    seen.add(3)
    assert 1 not in seen and 2 in seen and 3 in seen


def test_button_timeout_beyond_table_ttl_is_a_knob_error() -> None:
    _, errors = read_knobs(
        {
            "MARKDOWN_TABLE_CACHE_TTL_MINUTES": "10",
            "MARKDOWN_TABLE_BUTTON_TIMEOUT_MS": "600001",
        }
    )
    assert any("MARKDOWN_TABLE_BUTTON_TIMEOUT_MS=600001" in e for e in errors)
    _, ok = read_knobs(
        {
            "MARKDOWN_TABLE_CACHE_TTL_MINUTES": "10",
            "MARKDOWN_TABLE_BUTTON_TIMEOUT_MS": "600000",
        }
    )
    assert ok == []


def test_manage_py_check_refuses_a_button_that_outlives_its_table() -> None:
    _, errors = read_knobs(
        {
            "MARKDOWN_TABLE_CACHE_TTL_MINUTES": "1",
            "MARKDOWN_TABLE_BUTTON_TIMEOUT_MS": "120000",
        }
    )
    with (
        override_settings(KNOB_ERRORS=errors),
        pytest.raises(SystemCheckError, match="MARKDOWN_TABLE_BUTTON_TIMEOUT_MS"),
    ):
        call_command("check")


def test_default_button_timeout_fits_the_table_ttl() -> None:
    ttl = knobs().MARKDOWN_TABLE_CACHE_TTL_MINUTES * 60
    assert 0 < markdown_button_timeout_seconds() <= ttl
