"""Registry contract of the layers II caches: names, policies, ops, caps, keys."""

from __future__ import annotations

import pytest

from caches.layers.short_term_memory import user_short_term_memory_key
from caches.registry import EmergencyPolicy, registry
from tests.core.contract import check_managed_cache
from tests.layers2.conftest import LAYER_NAMES
from tomori.knobs import knobs

EXPECTED = {
    # name: (policy, invalidatable, extra ops, cap setting)
    "short_term_memory": (
        EmergencyPolicy.EXPIRED_ONLY,
        False,
        [],
        "SHORT_TERM_MEMORY_CACHE_MAX_ENTRIES",
    ),
    "voice_transcript": (
        EmergencyPolicy.CLEAR,
        False,
        [],
        "VOICE_TRANSCRIPT_CACHE_MAX_ENTRIES",
    ),
    "markdown_table": (
        EmergencyPolicy.CLEAR,
        False,
        [],
        "MARKDOWN_TABLE_CACHE_MAX_ENTRIES",
    ),
    "webhook": (
        EmergencyPolicy.CLEAR,
        True,
        ["channel", "persona"],
        "WEBHOOK_CACHE_MAX_ENTRIES",
    ),
    "webhook_identity": (
        EmergencyPolicy.CLEAR,
        True,
        [],
        "WEBHOOK_IDENTITY_CACHE_MAX_ENTRIES",
    ),
}

TTL_SECONDS = {
    "short_term_memory": knobs().SHORT_TERM_MEMORY_TTL_HOURS * 3600,
    "voice_transcript": knobs().VOICE_TRANSCRIPT_CACHE_TTL_MINUTES * 60,
    "markdown_table": knobs().MARKDOWN_TABLE_CACHE_TTL_MINUTES * 60,
    "webhook": None,
    "webhook_identity": knobs().WEBHOOK_IDENTITY_CACHE_TTL_MINUTES * 60,
}

SAMPLE_KEYS = {
    "short_term_memory": (
        "shortterm:user:11:22:3",
        user_short_term_memory_key(11, 22, 3),
    ),
    "voice_transcript": ("123", 123),
    "markdown_table": ("123", 123),
    "webhook": ("55", 55),
    "webhook_identity": ("77", 77),
}


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_is_registered_with_policy_and_ops(name: str) -> None:
    policy, invalidatable, ops, _ = EXPECTED[name]
    entry = registry.entry(name)
    assert entry.policy is policy
    assert entry.invalidatable is invalidatable
    assert entry.op_names() == ["key", "all", *ops]
    assert entry.description and entry.key_help


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_meets_the_managed_cache_contract(name: str) -> None:
    check_managed_cache(registry.get(name))


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_cap_and_ttl_come_from_settings(name: str) -> None:
    stats = registry.stats()[name]
    assert stats["cap"] == getattr(knobs(), EXPECTED[name][3])
    assert stats["ttl"] == TTL_SECONDS[name]


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_operator_key_parses_to_the_cache_key(name: str) -> None:
    typed, key = SAMPLE_KEYS[name]
    assert registry.parse_key(name, typed) == key


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_bad_operator_key_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        registry.parse_key(name, "not a key")


def test_webhook_keys_of_every_kind_parse() -> None:
    assert registry.parse_key("webhook", "5:7") == ("persona", 5, 7)
    assert registry.parse_key("webhook", "failed:5") == ("failed", 5)


def test_bus_gap_flush_keeps_state_layers() -> None:
    cleared = registry.clear_invalidatable()
    assert "short_term_memory" not in cleared
    assert "voice_transcript" not in cleared
    assert "markdown_table" not in cleared
    assert {"webhook", "webhook_identity"} <= set(cleared)
