"""The cache contract, run over every layer of this module set as the registry holds it.

Every check reaches a layer through `registry.get(name)` and fills it through
the layer's public read API (repository functions replaced by counted fakes,
so no database is needed), then checks what the registry, metrics and the
emergency clearer rely on: every member map of the layer (the spotlight
gate, last-good copies, remembered errors) expires, holds its cap, is
emptied and counted by `clear()` and drops an invalidated key (but the
last-good copies, kept to answer a reload that fails).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from django.db import OperationalError

from caches.core import BoundedTTLCache, FakeClock
from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    emoji_sticker,
    gemini_capability,
    guild_mcp_config,
    llm,
    novelai_capability,
    novelai_subscription,
    persona_sprite,
    persona_sprite_message,
    personal_spotlight,
    preset_avatar,
    st_preset,
    tomori_state,
    user,
)
from caches.layers._static_limits import MAX_NAMES
from caches.registry import EmergencyPolicy, registry
from tests.core.contract import check_managed_cache
from tests.layers.conftest import LAYER_NAMES
from tests.layers.fakes import llm_record, tomori_rows
from tomori.knobs import knobs
from tomori.repositories import channels as channels_repo
from tomori.repositories import expressions as expressions_repo
from tomori.repositories import integrations as integrations_repo
from tomori.repositories import llms as llms_repo
from tomori.repositories import presets as presets_repo
from tomori.repositories import servers as servers_repo
from tomori.repositories import spotlight as spotlight_repo
from tomori.repositories import sprites as sprites_repo
from tomori.repositories import users as users_repo

PRESERVED = {"llm", "gemini_capability", "novelai_capability"}
NOT_INVALIDATABLE = {
    "persona_sprite_message",
    "gemini_capability",
    "novelai_capability",
}
#: Layers filled by a warm rather than read-through (a first read is a hit).
WARMED = {"llm"}

# name -> (a key as an operator types it, the cache key it stands for)
SAMPLE_KEYS: dict[str, tuple[str, Any]] = {
    "tomori_state": ("123", 123),
    "user": ("5:9", (5, 9)),
    "emoji_sticker": ("7", 7),
    "channel_whitelist": ("1:22:3:9,4", (1, 22, 3, frozenset({4, 9}))),
    "channel_llm": ("1:22", (1, 22)),
    "channel_prompt": ("1:22", (1, 22)),
    "persona_sprite": ("8", 8),
    "persona_sprite_message": ("42", 42),
    "personal_spotlight": ("1:2:3", (1, 2, 3)),
    "guild_mcp_config": ("7", 7),
    "st_preset": ("7", 7),
    "novelai_subscription": ("7", 7),
    "llm": ("3", 3),
    "preset_avatar": ("4", 4),
    "gemini_capability": ("Models/Gemini-2.5-Pro", "gemini-2.5-pro"),
    "novelai_capability": ("kayra-v1", "kayra-v1"),
}
BAD_KEYS = {"gemini_capability": " ", "novelai_capability": " "}


def _minutes(setting: str) -> float:
    return float(getattr(knobs(), setting)) * 60.0


_STATE_TTL = _minutes("TOMORI_STATE_CACHE_TTL_MINUTES")
_SPOTLIGHT_TTL = _minutes("PERSONAL_SPOTLIGHT_CACHE_TTL_MINUTES")
_MCP_TTL = _minutes("GUILD_MCP_CONFIG_CACHE_TTL_MINUTES")

# name -> {member label: (cap setting or cap, ttl seconds or None)}
EXPECTED_MAPS: dict[str, dict[str, tuple[str | int, float | None]]] = {
    "tomori_state": {
        "primary": ("TOMORI_STATE_CACHE_MAX_ENTRIES", _STATE_TTL),
        "last_good": (
            "TOMORI_STATE_CACHE_MAX_ENTRIES",
            tomori_state.STALE_RETENTION_SECONDS,
        ),
        "errors": ("TOMORI_STATE_CACHE_MAX_ENTRIES", tomori_state.ERROR_MEMORY_SECONDS),
    },
    "user": {"primary": ("USER_CACHE_MAX_ENTRIES", _minutes("USER_CACHE_TTL_MINUTES"))},
    "emoji_sticker": {
        "primary": (
            "EMOJI_STICKER_CACHE_MAX_ENTRIES",
            _minutes("EMOJI_STICKER_CACHE_TTL_MINUTES"),
        )
    },
    "channel_whitelist": {
        "primary": (
            "CHANNEL_WHITELIST_CACHE_MAX_ENTRIES",
            _minutes("CHANNEL_WHITELIST_CACHE_TTL_MINUTES"),
        )
    },
    "channel_llm": {"primary": ("CHANNEL_LLM_CACHE_MAX_ENTRIES", _STATE_TTL)},
    "channel_prompt": {"primary": ("CHANNEL_PROMPT_CACHE_MAX_ENTRIES", _STATE_TTL)},
    "persona_sprite": {
        "primary": (
            "PERSONA_SPRITE_CACHE_MAX_ENTRIES",
            _minutes("PERSONA_SPRITE_CACHE_TTL_MINUTES"),
        )
    },
    "persona_sprite_message": {
        "primary": (
            "PERSONA_SPRITE_MESSAGE_CACHE_MAX_ENTRIES",
            _minutes("PERSONA_SPRITE_MESSAGE_CACHE_TTL_MINUTES"),
        )
    },
    "personal_spotlight": {
        "primary": ("PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES", _SPOTLIGHT_TTL),
        "gate": ("PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES", _SPOTLIGHT_TTL),
    },
    "guild_mcp_config": {
        "primary": ("GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES", _MCP_TTL),
        "last_good": (
            "GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES",
            guild_mcp_config.STALE_RETENTION_SECONDS,
        ),
    },
    "st_preset": {
        "primary": (
            "ST_PRESET_CACHE_MAX_ENTRIES",
            _minutes("ST_PRESET_CACHE_TTL_MINUTES"),
        )
    },
    "novelai_subscription": {
        "primary": (
            "NOVELAI_SUBSCRIPTION_CACHE_MAX_ENTRIES",
            _minutes("NOVELAI_SUBSCRIPTION_CACHE_TTL_MINUTES"),
        )
    },
    "llm": {"primary": ("LLM_CACHE_MAX_ENTRIES", None)},
    "preset_avatar": {"primary": ("PRESET_AVATAR_CACHE_MAX_ENTRIES", None)},
    "gemini_capability": {"primary": (MAX_NAMES, None)},
    "novelai_capability": {"primary": (MAX_NAMES, None)},
}


# --------------------------------------------------------------- drivers


class Loads:
    """Counts the repository calls the fakes answered."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, value: Any) -> Any:
        self.calls += 1
        return value


Read = Callable[[int], Awaitable[Any]]
Install = Callable[[pytest.MonkeyPatch, Loads], Read]


def _tomori_state(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    def rows(server_disc_id: int) -> Any:
        if server_disc_id % 3 == 2:  # every third read fails: the errors map
            loads(None)
            raise OperationalError("could not connect to server")
        return loads(tomori_rows(server_disc_id))

    mp.setattr(servers_repo, "load_tomori_state_rows", rows)
    return tomori_state.get_cached_tomori_state


def _user(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(users_repo, "get_user_by_disc_id", lambda i: loads(f"user {i}"))
    mp.setattr(users_repo, "is_user_blacklisted", lambda **_: loads(False))

    async def read(i: int) -> Any:
        if i % 2:  # odd entries are blacklist answers, even ones user rows
            return await user.get_cached_blacklist_status(1, i)
        return await user.get_cached_user_row(i)

    return read


def _emoji_sticker(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        expressions_repo,
        "load_stored_expressions",
        lambda server_id, **_: loads(f"expressions {server_id}"),
    )
    return emoji_sticker.load_emoji_sticker_cache


def _channel_whitelist(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        channels_repo,
        "load_whitelist_decision",
        lambda **kw: loads(f"decision {kw['channel_disc_id']}"),
    )

    async def read(i: int) -> Any:
        # Threads and plain channels; roles unknown, none, or some.
        return await channel_whitelist.get_cached_whitelist_status(
            1,
            i + 1,
            parent_disc_id=i if i % 2 else None,
            role_ids=None if i % 3 == 0 else range(i % 3 - 1),
        )

    return read


def _channel_llm(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        channels_repo,
        "get_channel_llm_overrides",
        lambda *, server_id, channel_disc_ids: loads({c: 7 for c in channel_disc_ids}),
    )
    return lambda i: channel_llm.get_cached_channel_llm(1, i)


def _channel_prompt(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        channels_repo,
        "get_channel_prompt_override",
        lambda **kw: loads(f"prompt {kw['channel_disc_id']}"),
    )
    return lambda i: channel_prompt.get_cached_channel_prompt(1, i)


def _persona_sprite(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(sprites_repo, "list_persona_sprites", lambda i: loads((f"s{i}",)))
    return persona_sprite.get_cached_persona_sprites


def _persona_sprite_message(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        sprites_repo,
        "get_sprite_messages",
        lambda ids: loads({i: f"message {i}" for i in ids}),
    )
    return persona_sprite_message.get_cached_persona_sprite_message


def _personal_spotlight(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(spotlight_repo, "server_has_personal_spotlights", lambda _: loads(True))
    mp.setattr(spotlight_repo, "get_personal_spotlight_status", lambda **_: loads(None))
    # One server per entry, so the gate fills as fast as the result map.
    return lambda i: personal_spotlight.get_cached_personal_spotlight_status(i, 5, i)


def _guild_mcp_config(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(integrations_repo, "list_guild_mcp_configs", lambda _: loads(()))
    return guild_mcp_config.get_cached_guild_mcp_configs


def _st_preset(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(presets_repo, "get_active_st_preset", lambda i: loads(f"preset {i}"))
    return st_preset.get_cached_st_preset


def _novelai_subscription(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        integrations_repo, "get_novelai_subscription", lambda i: loads(f"tier {i}")
    )
    return novelai_subscription.get_cached_novelai_subscription


def _llm(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    table: list[Any] = []
    mp.setattr(llms_repo, "list_llms", lambda: loads(tuple(table)))

    async def read(i: int) -> Any:
        if all(record.id != i for record in table):  # a new row, then a warm
            table.append(llm_record(i))
            await llm.initialize_llm_cache()
        return await llm.get_llm(i)

    return read


def _preset_avatar(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(presets_repo, "get_preset_persona", lambda _: loads(None))
    return preset_avatar.get_preset_avatar


def _static(lookup: Callable[[str], Any]) -> Install:
    def install(_mp: pytest.MonkeyPatch, _loads: Loads) -> Read:
        async def read(i: int) -> Any:
            return lookup(f"contract-model-{i}")

        return read

    return install


DRIVERS: dict[str, Install] = {
    "tomori_state": _tomori_state,
    "user": _user,
    "emoji_sticker": _emoji_sticker,
    "channel_whitelist": _channel_whitelist,
    "channel_llm": _channel_llm,
    "channel_prompt": _channel_prompt,
    "persona_sprite": _persona_sprite,
    "persona_sprite_message": _persona_sprite_message,
    "personal_spotlight": _personal_spotlight,
    "guild_mcp_config": _guild_mcp_config,
    "st_preset": _st_preset,
    "novelai_subscription": _novelai_subscription,
    "llm": _llm,
    "preset_avatar": _preset_avatar,
    "gemini_capability": _static(gemini_capability.get_gemini_token_limits),
    "novelai_capability": _static(novelai_capability.get_novelai_token_limits),
}


# --------------------------------------------------------------- helpers


def member_maps(name: str) -> dict[str, BoundedTTLCache[Any, Any]]:
    """Return every map a registered layer keeps, by label ("primary" first)."""
    cache: Any = registry.get(name)
    if isinstance(cache, BoundedTTLCache):
        return {"primary": cache}
    return cache.maps()  # type: ignore[no-any-return]


def resident(name: str) -> int:
    """Return the entries held by every member map of a layer."""
    return sum(len(cache) for cache in member_maps(name).values())


async def fill(read: Read, count: int) -> None:
    """Read entries 0..count-1 through the layer's public API."""
    for i in range(count):
        await read(i)


layers = pytest.mark.parametrize("name", LAYER_NAMES)


@pytest.fixture
def driver(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Read, Loads]:
    """Return the layer's public read (over fake repositories) and its load count."""
    loads = Loads()
    return DRIVERS[name](monkeypatch, loads), loads


@pytest.fixture
def registry_clock() -> Iterator[FakeClock]:
    """Drive every registered cache from one fake clock (the real one afterwards)."""
    fake = FakeClock(start=1000.0)
    registry.set_clock(fake)
    yield fake
    registry.set_clock(time.monotonic)


# --------------------------------------------------------------- registration


def test_every_layer_has_a_driver_and_expected_maps() -> None:
    assert set(DRIVERS) == set(LAYER_NAMES) == set(EXPECTED_MAPS)


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
def test_layer_maps_have_their_caps_and_ttls(name: str) -> None:
    maps = member_maps(name)
    expected = EXPECTED_MAPS[name]
    assert list(maps) == list(expected)
    for label, (cap, ttl) in expected.items():
        want = cap if isinstance(cap, int) else int(getattr(knobs(), cap))
        assert (maps[label].maxsize, maps[label].ttl) == (want, ttl), label


# --------------------------------------------------------------- behaviour


@layers
async def test_filled_layer_meets_the_managed_cache_contract(name, driver) -> None:
    read, _ = driver
    await fill(read, 6)
    assert len(registry.get(name)) > 0
    check_managed_cache(registry.get(name))


@layers
async def test_layer_serves_a_hit_without_loading(name, driver, monkeypatch) -> None:
    read, loads = driver
    first = await read(0)
    calls, primary = loads.calls, member_maps(name)["primary"]
    hits, misses = primary.hits, primary.misses

    def no_load(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a hit must not reach get_or_load")

    for cache in (registry.get(name), *member_maps(name).values()):
        if hasattr(cache, "get_or_load"):
            monkeypatch.setattr(cache, "get_or_load", no_load)
    assert await read(0) == first
    assert loads.calls == calls
    assert (primary.hits, primary.misses) == (hits + 1, misses)


@pytest.mark.parametrize("name", sorted(set(LAYER_NAMES) - WARMED))
async def test_layer_counts_one_miss_per_load(name, driver) -> None:
    read, _ = driver
    primary = member_maps(name)["primary"]
    misses = primary.misses
    await read(1)
    assert primary.misses == misses + 1


@layers
async def test_every_member_map_expires(name, driver, registry_clock) -> None:
    read, _ = driver
    await fill(read, 6)
    maps = member_maps(name)
    before = {label: len(cache) for label, cache in maps.items()}
    assert all(before.values()), before  # every member took entries
    ttls = [cache.ttl for cache in maps.values() if cache.ttl is not None]
    registry_clock.advance(max(ttls, default=0.0) + 1)
    for label, cache in maps.items():
        assert len(cache) == (before[label] if cache.ttl is None else 0), label
    assert len(registry.get(name)) == sum(
        n for label, n in before.items() if maps[label].ttl is None
    )


@layers
async def test_every_member_map_holds_its_cap(name, driver, monkeypatch) -> None:
    read, _ = driver
    maps = member_maps(name)
    for cache in maps.values():
        monkeypatch.setattr(cache, "maxsize", 3)
    await fill(read, 15)
    assert {label: len(cache) for label, cache in maps.items()} == dict.fromkeys(
        maps, 3
    )
    assert registry.sizes()[name] == 3 * len(maps)


@layers
async def test_clear_empties_every_member_and_counts_it(name, driver) -> None:
    read, _ = driver
    await fill(read, 6)
    held = resident(name)
    assert held == len(registry.get(name)) == registry.sizes()[name]
    assert registry.stats()[name]["size"] == held
    assert registry.clear(name) == held
    assert all(len(cache) == 0 for cache in member_maps(name).values())


#: Member maps an invalidation leaves: the value served if the reload fails.
KEPT_PAST_INVALIDATION = {"last_good"}


@layers
async def test_invalidate_drops_the_key_from_every_member(name, driver) -> None:
    read, _ = driver
    await fill(read, 6)
    maps = member_maps(name)
    dropping = {k: c for k, c in maps.items() if k not in KEPT_PAST_INVALIDATION}
    for label, cache in dropping.items():
        key = cache.keys()[0]
        holders = sum(key in other for other in dropping.values())
        before = resident(name)
        assert registry.invalidate(name, key) == holders, label
        assert not any(key in other for other in dropping.values()), label
        assert resident(name) == before - holders


@pytest.mark.parametrize(
    ("cache", "text"),
    [
        ("webhook", "0"),
        ("webhook", "１２３"),
        ("webhook", "5:" + "9" * 400),
        ("short_term_memory", "shortterm:user:0:5"),
        ("short_term_memory", "shortterm:user:１:5"),
        ("voice_transcript", "0"),
        ("voice_transcript", "9" * 30),
    ],
)
def test_operator_keys_follow_the_id_rules_in_every_layer(
    cache: str, text: str
) -> None:
    from caches.layers import load_all

    load_all()
    with pytest.raises(ValueError):
        registry.parse_key(cache, text)
