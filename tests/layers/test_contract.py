"""The cache contract, run over every layer of this module set as registered."""

from __future__ import annotations

from typing import Any

import pytest

from caches.core import MISSING, BoundedTTLCache, FakeClock
from caches.registry import EmergencyPolicy, registry
from tests.core.contract import SYNC_CONTRACT, SyncCheck, check_id, check_managed_cache
from tests.layers.conftest import LAYER_NAMES

PRESERVED = {"llm", "gemini_capability", "novelai_capability"}
NOT_INVALIDATABLE = {
    "persona_sprite_message",
    "gemini_capability",
    "novelai_capability",
}

# name -> (a key as an operator types it, the cache key it stands for)
SAMPLE_KEYS: dict[str, tuple[str, Any]] = {
    "tomori_state": ("123", 123),
    "user": ("5:9", (5, 9)),
    "emoji_sticker": ("7", 7),
    "channel_whitelist": ("1:22:3:9,4", "1:22:3:4,9"),
    "channel_llm": ("1:22", (1, 22)),
    "channel_prompt": ("1:22", (1, 22)),
    "persona_sprite": ("8", 8),
    "persona_sprite_message": ("42", 42),
    "personal_spotlight": ("1:2:3", "1:2:3"),
    "guild_mcp_config": ("7", 7),
    "st_preset": ("7", 7),
    "novelai_subscription": ("7", 7),
    "llm": ("3", 3),
    "preset_avatar": ("4", 4),
    "gemini_capability": ("Models/Gemini-2.5-Pro", "gemini-2.5-pro"),
    "novelai_capability": ("kayra-v1", "kayra-v1"),
}
BAD_KEYS = {"gemini_capability": " ", "novelai_capability": " "}


def underlying(name: str) -> BoundedTTLCache[Any, Any]:
    """Return the BoundedTTLCache that holds a layer's (primary) entries."""
    cache: Any = registry.get(name)
    for attr in ("primary", "by_id"):
        if hasattr(cache, attr):
            return getattr(cache, attr)  # type: ignore[no-any-return]
    assert isinstance(cache, BoundedTTLCache)
    return cache


layers = pytest.mark.parametrize("name", LAYER_NAMES)


@layers
def test_layer_is_registered_with_its_policy(name: str) -> None:
    entry = registry.entry(name)
    expected = EmergencyPolicy.PRESERVE if name in PRESERVED else EmergencyPolicy.CLEAR
    assert entry.policy == expected
    assert entry.invalidatable == (name not in NOT_INVALIDATABLE)
    assert entry.description and entry.key_help


@layers
def test_layer_parses_operator_keys(name: str) -> None:
    text, key = SAMPLE_KEYS[name]
    assert registry.parse_key(name, text) == key
    with pytest.raises(ValueError):
        registry.parse_key(name, BAD_KEYS.get(name, "not-a-key"))


@layers
def test_layer_is_a_managed_cache(name: str) -> None:
    underlying(name).set(SAMPLE_KEYS[name][1], "value")
    check_managed_cache(registry.get(name))


@layers
def test_layer_stores_values_and_negative_entries(name: str) -> None:
    cache = underlying(name)
    key = SAMPLE_KEYS[name][1]
    cache.set(key, "value")
    cache.set("negative", None)
    assert cache.get(key) == "value"
    assert cache.get("negative") is None
    assert cache.get("never stored") is MISSING


@layers
def test_layer_entries_expire_with_its_ttl(name: str, clock: FakeClock) -> None:
    cache = underlying(name)
    cache.set("k", 1)
    if cache.ttl is None:
        clock.advance(10 * 365 * 86400)
        assert cache.get("k") == 1
        return
    clock.advance(cache.ttl - 0.001)
    assert cache.get("k") == 1
    clock.advance(0.002)
    assert cache.get("k") is MISSING


@layers
def test_layer_respects_its_cap(name: str) -> None:
    cache = underlying(name)
    for i in range(cache.maxsize + 5):
        cache.set(i, i)
    assert len(cache) == cache.maxsize
    assert cache.get(0) is MISSING  # the oldest went first
    assert cache.get(cache.maxsize + 4) == cache.maxsize + 4


@layers
def test_layer_invalidation_and_clear_count_entries(name: str) -> None:
    cache = underlying(name)
    key = SAMPLE_KEYS[name][1]
    cache.set(key, "value")
    cache.set("other", "value")
    assert registry.apply(name, "key", key) == 1
    assert registry.apply(name, "key", key) == 0
    assert registry.apply(name, "all") == 1
    assert len(registry.get(name)) == 0


@pytest.mark.parametrize("check", SYNC_CONTRACT, ids=check_id)
@layers
def test_layer_cache_meets_core_contract(name: str, check: SyncCheck) -> None:
    layer = underlying(name)

    def make_cache(*, maxsize: int, ttl: float | None, clock: FakeClock) -> Any:
        return BoundedTTLCache(
            layer.name,
            maxsize=maxsize,
            ttl=ttl,
            sweep_interval=layer.sweep_interval,
            clock=clock,
        )

    check(make_cache)
