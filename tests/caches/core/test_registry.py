"""The cache registry: naming, lookups, operations, policies and key parsing."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from caches.core import BoundedTTLCache, FakeClock
from caches.core.clock import Clock
from caches.registry import (
    CacheRegistry,
    EmergencyPolicy,
    ManagedCache,
    UnknownCacheError,
    UnknownOperationError,
    registry,
)


def make_cache(name: str, clock: FakeClock | None = None) -> BoundedTTLCache[Any, Any]:
    """Build a small cache on a fake clock."""
    return BoundedTTLCache(name, maxsize=100, ttl=60, clock=clock or FakeClock())


class CatalogAdapter:
    """A non-BoundedTTLCache object that still satisfies ManagedCache."""

    def __init__(self) -> None:
        self.models = {"gpt": 1, "claude": 2}
        self.clock: Clock | None = None

    def __len__(self) -> int:
        return len(self.models)

    def clear(self) -> int:
        count = len(self.models)
        self.models.clear()
        return count

    def invalidate(self, key: Any) -> int:
        return 1 if self.models.pop(key, None) is not None else 0

    def clear_expired(self) -> int:
        return 0

    def stats(self) -> dict[str, Any]:
        return {"name": "catalog", "size": len(self.models)}

    def set_clock(self, clock: Clock) -> None:
        self.clock = clock

    def maps(self) -> dict[str, Any]:
        return {}  # a plain dict, no core map behind it


def parse_server_id(text: str) -> Hashable:
    """Parse a Discord snowflake, as a layer would."""
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a numeric Discord id")
    return int(text)


def test_register_returns_cache_and_lists_it(fresh_registry: CacheRegistry) -> None:
    cache = make_cache("tomori_state")
    assert (
        fresh_registry.register(
            "tomori_state", cache, policy=EmergencyPolicy.CLEAR, description="personas"
        )
        is cache
    )
    fresh_registry.register("user", make_cache("user"), policy=EmergencyPolicy.CLEAR)
    assert fresh_registry.names() == ["tomori_state", "user"]
    assert fresh_registry.get("tomori_state") is cache
    entry = fresh_registry.entry("tomori_state")
    assert (entry.name, entry.policy, entry.description) == (
        "tomori_state",
        EmergencyPolicy.CLEAR,
        "personas",
    )
    assert [e.name for e in fresh_registry.entries()] == ["tomori_state", "user"]
    assert "user" in fresh_registry


def test_reregistering_a_name_replaces_it(fresh_registry: CacheRegistry) -> None:
    first, second = make_cache("user"), make_cache("user")
    fresh_registry.register("user", first, policy=EmergencyPolicy.CLEAR)
    fresh_registry.register("user", second, policy=EmergencyPolicy.PRESERVE)
    assert fresh_registry.names() == ["user"]
    assert fresh_registry.get("user") is second
    assert fresh_registry.entry("user").policy is EmergencyPolicy.PRESERVE


def test_unknown_name_lists_known_names(fresh_registry: CacheRegistry) -> None:
    fresh_registry.register("user", make_cache("user"), policy="clear")
    for call in (
        lambda: fresh_registry.get("nope"),
        lambda: fresh_registry.clear("nope"),
        lambda: fresh_registry.invalidate("nope", "k"),
        lambda: fresh_registry.apply("nope", "all"),
        lambda: fresh_registry.unregister("nope"),
    ):
        with pytest.raises(UnknownCacheError) as caught:
            call()
        assert isinstance(caught.value, KeyError)
        assert "'nope'" in str(caught.value) and "user" in str(caught.value)


def test_sizes_and_stats_cover_every_cache(fresh_registry: CacheRegistry) -> None:
    cache = make_cache("user")
    cache.set(1, "row")
    fresh_registry.register(
        "user", cache, policy=EmergencyPolicy.CLEAR, description="user rows"
    )
    fresh_registry.register(
        "llm", make_cache("llm"), policy=EmergencyPolicy.PRESERVE, invalidatable=False
    )
    assert fresh_registry.sizes() == {"user": 1, "llm": 0}
    stats = fresh_registry.stats()
    assert stats["user"]["size"] == 1
    assert stats["user"]["policy"] == "clear"
    assert stats["user"]["description"] == "user rows"
    assert stats["llm"]["invalidatable"] is False


def test_builtin_and_named_ops(fresh_registry: CacheRegistry) -> None:
    cache = make_cache("channel_whitelist")
    for key in ("1:10", "1:11", "2:20"):
        cache.set(key, True)

    def by_server(server_id: int) -> int:
        return cache.invalidate_prefix(f"{server_id}:")

    fresh_registry.register(
        "channel_whitelist", cache, policy="clear", ops={"server": by_server}
    )
    assert fresh_registry.apply("channel_whitelist", "server", 1) == 2
    assert fresh_registry.apply("channel_whitelist", "key", "2:20") == 1
    cache.set("3:30", True)
    assert fresh_registry.invalidate("channel_whitelist", "3:30") == 1
    cache.set("4:40", True)
    assert fresh_registry.apply("channel_whitelist", "all") == 1
    with pytest.raises(UnknownOperationError) as caught:
        fresh_registry.apply("channel_whitelist", "guild", 1)
    assert "key, all, server" in str(caught.value)


def test_ops_may_not_shadow_builtins(fresh_registry: CacheRegistry) -> None:
    with pytest.raises(ValueError, match="built in"):
        fresh_registry.register(
            "user", make_cache("user"), policy="clear", ops={"all": lambda: 0}
        )


def test_clear_invalidatable_skips_preserved_caches(
    fresh_registry: CacheRegistry,
) -> None:
    volatile, static = make_cache("user"), make_cache("llm")
    volatile.set(1, 1)
    static.set(2, 2)
    fresh_registry.register("user", volatile, policy="clear")
    fresh_registry.register("llm", static, policy="preserve", invalidatable=False)
    assert fresh_registry.clear_invalidatable() == {"user": 1}
    assert len(static) == 1
    assert fresh_registry.clear_all() == {"user": 0, "llm": 1}


def test_set_clock_reaches_every_cache(fresh_registry: CacheRegistry) -> None:
    cache, adapter = make_cache("user"), CatalogAdapter()
    fresh_registry.register("user", cache, policy="clear")
    fresh_registry.register("openrouter_catalog", adapter, policy="preserve")
    fake = FakeClock(start=500.0)
    fresh_registry.set_clock(fake)
    assert cache.clock is fake
    assert adapter.clock is fake


def test_any_managed_cache_can_be_registered(fresh_registry: CacheRegistry) -> None:
    adapter = CatalogAdapter()
    assert isinstance(adapter, ManagedCache)
    fresh_registry.register("openrouter_catalog", adapter, policy="preserve")
    assert fresh_registry.apply("openrouter_catalog", "key", "gpt") == 1
    assert fresh_registry.sizes() == {"openrouter_catalog": 1}
    assert fresh_registry.stats()["openrouter_catalog"]["policy"] == "preserve"


def test_non_cache_is_rejected(fresh_registry: CacheRegistry) -> None:
    with pytest.raises(TypeError):
        fresh_registry.register("user", {"not": "a cache"}, policy="clear")  # type: ignore[type-var]


def test_default_parse_key_rejects_empty(fresh_registry: CacheRegistry) -> None:
    fresh_registry.register("user", make_cache("user"), policy="clear")
    assert fresh_registry.parse_key("user", "abc") == "abc"
    for bad in ("", "   "):
        with pytest.raises(ValueError, match="'user'.*empty"):
            fresh_registry.parse_key("user", bad)


def test_custom_parse_key_rejection_names_cache_and_format(
    fresh_registry: CacheRegistry,
) -> None:
    fresh_registry.register(
        "tomori_state",
        make_cache("tomori_state"),
        policy="clear",
        parse_key=parse_server_id,
        key_help="a Discord server id, e.g. 123456789012345678",
    )
    assert fresh_registry.parse_key("tomori_state", "42") == 42
    with pytest.raises(ValueError) as caught:
        fresh_registry.parse_key("tomori_state", "abc")
    message = str(caught.value)
    assert "'tomori_state'" in message and "not a numeric" in message
    assert "Discord server id" in message


def test_emergency_policy_values() -> None:
    assert [p.value for p in EmergencyPolicy] == ["clear", "preserve", "expired_only"]
    assert EmergencyPolicy("expired_only") is EmergencyPolicy.EXPIRED_ONLY


def test_process_registry_is_a_cache_registry() -> None:
    assert isinstance(registry, CacheRegistry)
