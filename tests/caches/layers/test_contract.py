"""The cache contract, run over every layer the registry holds.

The suite is parametrized over `registry.names()` (every layer module
imported): a registered layer without a case in `CASES` fails
`test_every_registered_layer_has_a_case` and each of its parametrized checks.

Every check reaches a layer through `registry.get(name)` and fills it through
the layer's public API (repository functions replaced by counted fakes, so
no database is needed), then checks what the registry, metrics and the
emergency clearer rely on: every member map of the layer (the spotlight
gate, last-good copies, remembered errors) expires, holds its cap, is
emptied and counted by `clear()` and drops an invalidated key (but the
last-good copies, kept to answer a reload that fails). Caps and TTLs are
read from the layer's maps, never restated here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import OperationalError
from django.test import override_settings

from caches.core import BoundedTTLCache, FakeClock
from caches.layers import (
    channel_llm,
    channel_prompt,
    channel_whitelist,
    declared,
    emoji_sticker,
    gemini_capability,
    guild_mcp_config,
    llm,
    load_all,
    markdown_table,
    novelai_capability,
    novelai_subscription,
    persona_sprite,
    persona_sprite_message,
    personal_spotlight,
    preset_avatar,
    short_term_memory,
    st_preset,
    tomori_state,
    user,
    voice_transcript,
    webhook,
    webhook_identity,
)
from caches.layers.short_term_memory import user_short_term_memory_key
from caches.layers.voice_transcript import TranscriptSource
from caches.layers.webhook import CreatedWebhook
from caches.layers.webhook_identity import WebhookIdentity
from caches.registry import EmergencyPolicy, registry
from tests.caches.core.contract import check_managed_cache
from tests.caches.layers.fakes import llm_record, tomori_rows
from tomori.domain.crypto import SecretToken
from tomori.domain.repositories import channels as channels_repo
from tomori.domain.repositories import expressions as expressions_repo
from tomori.domain.repositories import integrations as integrations_repo
from tomori.domain.repositories import llms as llms_repo
from tomori.domain.repositories import presets as presets_repo
from tomori.domain.repositories import servers as servers_repo
from tomori.domain.repositories import spotlight as spotlight_repo
from tomori.domain.repositories import sprites as sprites_repo
from tomori.domain.repositories import users as users_repo
from tomori.domain.repositories import webhooks as webhooks_repo
from tomori.domain.repositories.channels import ServerWhitelist

load_all()  # every layer module registers its layer

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
    mp.setattr(users_repo, "blacklisted_users", lambda s: loads(frozenset({s + 1})))

    async def read(i: int) -> Any:
        if i % 2:  # odd entries are servers' blacklists, even ones user rows
            return await user.get_cached_blacklist_status(i, 7)
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
    # A role whitelist: answers depend on the roles, one entry per role set
    # (an answer for every role set is kept once, under "*").
    mp.setattr(
        channels_repo,
        "load_server_whitelist",
        lambda server_disc_id: loads(
            ServerWhitelist(
                known=True,
                enabled=False,
                channels={},
                allowed_roles=frozenset({server_disc_id}),
            )
        ),
    )

    async def read(i: int) -> Any:
        # One server per entry, so the servers' rows fill as fast as the
        # decisions; threads and plain channels; roles unknown, none, or some.
        return await channel_whitelist.get_cached_whitelist_status(
            i,
            i + 1,
            parent_disc_id=i if i % 2 else None,
            role_ids=None if i % 3 == 0 else range(i % 3 - 1),
        )

    return read


def _channel_llm(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    # Every channel has an override, so both the gates and the values fill.
    mp.setattr(
        channels_repo,
        "channels_with_llm_override",
        lambda server_ids: loads({s: frozenset({s}) for s in server_ids}),
    )
    mp.setattr(
        channels_repo,
        "get_channel_llm_overrides",
        lambda *, server_id, channel_disc_ids: loads({c: 7 for c in channel_disc_ids}),
    )
    return lambda i: channel_llm.get_cached_channel_llm(i, i)


def _channel_prompt(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(
        channels_repo,
        "channels_with_prompt_override",
        lambda server_ids: loads({s: frozenset({s}) for s in server_ids}),
    )
    mp.setattr(
        channels_repo,
        "get_channel_prompt_override",
        lambda **kw: loads(f"prompt {kw['channel_disc_id']}"),
    )
    return lambda i: channel_prompt.get_cached_channel_prompt(i, i)


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


def _markdown_table(_mp: pytest.MonkeyPatch, _loads: Loads) -> Read:
    async def read(i: int) -> Any:
        markdown_table.cache_markdown_table(i, f"| table {i} |")
        return markdown_table.get_cached_markdown_table(i)

    return read


def _voice_transcript(_mp: pytest.MonkeyPatch, _loads: Loads) -> Read:
    async def read(i: int) -> Any:
        voice_transcript.cache_voice_transcript(
            i, f"said {i}", source=TranscriptSource.STT
        )
        return voice_transcript.get_cached_voice_transcript(i)

    return read


def _webhook(mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    mp.setattr(webhooks_repo, "get_managed_webhook", lambda _channel: loads(None))
    mp.setattr(webhooks_repo, "save_managed_webhook", lambda **_: None)

    async def create(channel_disc_id: int) -> CreatedWebhook:
        return CreatedWebhook(channel_disc_id + 1, SecretToken(f"t-{channel_disc_id}"))

    return lambda i: webhook.get_channel_webhook(i + 1, create_webhook=create)


def _webhook_identity(_mp: pytest.MonkeyPatch, loads: Loads) -> Read:
    async def resolve(webhook_disc_id: int) -> WebhookIdentity:
        return loads(WebhookIdentity(webhook_disc_id, f"user {webhook_disc_id}"))

    return lambda i: webhook_identity.resolve_webhook_identity(i + 1, resolve)


@dataclass(frozen=True)
class Case:
    """What the contract needs of one layer besides what the registry says."""

    #: The emergency clearer's policy and whether the bus may invalidate it
    #: (the spec's requirements for the layer).
    policy: EmergencyPolicy
    invalidatable: bool
    #: A key as an operator types it, and the cache key it stands for.
    typed: str
    key: Any
    #: Fills the layer through its public API; None: not driven here (why).
    driver: Install | None
    why_not_driven: str = ""
    #: "read-through" (a miss loads), "warmed" (a warm fills it), "written"
    #: (the caller stores values; nothing loads).
    fill: str = "read-through"
    bad_key: str = "not-a-key"


CLEAR, PRESERVE = EmergencyPolicy.CLEAR, EmergencyPolicy.PRESERVE

#: Each layer's case, by the name its module declares (none typed here).

CASES: dict[str, Case] = {
    tomori_state.NAME: Case(CLEAR, True, "123", 123, _tomori_state),
    user.NAME: Case(CLEAR, True, "5:*", (5, "*"), _user),
    emoji_sticker.NAME: Case(CLEAR, True, "7", 7, _emoji_sticker),
    channel_whitelist.NAME: Case(
        CLEAR, True, "1:22:3:9,4", (1, 22, 3, frozenset({4, 9})), _channel_whitelist
    ),
    channel_llm.NAME: Case(CLEAR, True, "1:22", (1, 22), _channel_llm),
    channel_prompt.NAME: Case(CLEAR, True, "1:22", (1, 22), _channel_prompt),
    persona_sprite.NAME: Case(CLEAR, True, "8", 8, _persona_sprite),
    persona_sprite_message.NAME: Case(CLEAR, False, "42", 42, _persona_sprite_message),
    personal_spotlight.NAME: Case(CLEAR, True, "1:2:3", (1, 2, 3), _personal_spotlight),
    guild_mcp_config.NAME: Case(CLEAR, True, "7", 7, _guild_mcp_config),
    st_preset.NAME: Case(CLEAR, True, "7", 7, _st_preset),
    novelai_subscription.NAME: Case(CLEAR, True, "7", 7, _novelai_subscription),
    llm.NAME: Case(PRESERVE, True, "3", 3, _llm, fill="warmed"),
    preset_avatar.NAME: Case(CLEAR, True, "4", 4, _preset_avatar),
    gemini_capability.NAME: Case(
        PRESERVE,
        False,
        "Models/Gemini-2.5-Pro",
        "gemini-2.5-pro",
        _static(gemini_capability.get_gemini_token_limits),
        bad_key=" ",
    ),
    novelai_capability.NAME: Case(
        PRESERVE,
        False,
        "kayra-v1",
        "kayra-v1",
        _static(novelai_capability.get_novelai_token_limits),
        bad_key=" ",
    ),
    markdown_table.NAME: Case(
        CLEAR, False, "123", 123, _markdown_table, fill="written"
    ),
    voice_transcript.NAME: Case(
        CLEAR, False, "123", 123, _voice_transcript, fill="written"
    ),
    webhook.NAME: Case(CLEAR, True, "55", 55, _webhook),
    webhook_identity.NAME: Case(CLEAR, True, "77", 77, _webhook_identity),
    short_term_memory.NAME: Case(
        EmergencyPolicy.EXPIRED_ONLY,
        False,
        "shortterm:user:11:22:3",
        user_short_term_memory_key(11, 22, 3),
        None,
        why_not_driven=(
            "its writes are durable (a queued table write per entry); "
            "tests/caches/layers/short_term_memory/test_short_term_memory*.py drive it end to end"
        ),
    ),
}
#: Every registered layer, as the registry lists them.
NAMES = registry.names()
DRIVEN = [name for name in NAMES if name in CASES and CASES[name].driver]

# --------------------------------------------------------------- helpers


def member_maps(name: str) -> dict[str, BoundedTTLCache[Any, Any]]:
    """Return every map a registered layer keeps, by label ("primary" first)."""
    return dict(registry.get(name).maps())


def resident(name: str) -> int:
    """Return the entries held by every member map of a layer."""
    return sum(len(cache) for cache in member_maps(name).values())


async def fill(read: Read, count: int) -> None:
    """Read entries 0..count-1 through the layer's public API."""
    for i in range(count):
        await read(i)


registered = pytest.mark.parametrize("name", NAMES)
layers = pytest.mark.parametrize("name", DRIVEN)


@pytest.fixture
def driver(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Read, Loads]:
    """Return the layer's public read (over fake repositories) and its load count."""
    loads = Loads()
    install = CASES[name].driver
    assert install is not None
    return install(monkeypatch, loads), loads


@pytest.fixture
def registry_clock() -> Iterator[FakeClock]:
    """Drive every registered cache from one fake clock (the real one afterwards)."""
    fake = FakeClock(start=1000.0)
    registry.set_clock(fake)
    yield fake
    registry.set_clock(time.monotonic)


# --------------------------------------------------------------- registration


def test_every_registered_layer_has_a_case() -> None:
    assert set(CASES) == set(registry.names())


def test_every_layer_not_driven_says_why() -> None:
    assert all(case.why_not_driven for case in CASES.values() if case.driver is None)


@registered
def test_layer_is_registered_with_its_policy(name: str) -> None:
    entry, case = registry.entry(name), CASES[name]
    assert entry.policy == case.policy
    assert entry.invalidatable == case.invalidatable
    assert entry.description and entry.key_help


@registered
def test_layer_parses_operator_keys(name: str) -> None:
    case = CASES[name]
    assert registry.parse_key(name, case.typed) == case.key
    with pytest.raises(ValueError, match=name):
        registry.parse_key(name, case.bad_key)


@registered
def test_layer_meets_the_managed_cache_contract(name: str) -> None:
    check_managed_cache(registry.get(name))


@registered
def test_layer_reports_its_maps_caps_and_ttl(name: str) -> None:
    maps = member_maps(name)
    assert all(cache.maxsize > 0 for cache in maps.values())
    assert all(cache.ttl is None or cache.ttl > 0 for cache in maps.values())
    stats = registry.stats()[name]
    assert stats["cap"] == sum(cache.maxsize for cache in maps.values())
    if maps["primary"].ttl is not None:  # else each entry has its own ttl
        assert stats["ttl"] == maps["primary"].ttl


def test_bus_gap_flush_clears_exactly_the_invalidatable_layers() -> None:
    cleared = registry.clear_invalidatable()
    assert set(cleared) == {e.name for e in registry.entries() if e.invalidatable}


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


#: Known defects this suite found, (check, layer) -> why; strict: fixing one fails.
#: (check, layer) pairs a layer is known to fail (strict xfail); none now.
KNOWN_DEFECTS: dict[tuple[str, str], str] = {}


def _params(check: str, names: list[str]) -> list[Any]:
    return [
        pytest.param(
            name,
            marks=[pytest.mark.xfail(reason=KNOWN_DEFECTS[check, name], strict=True)]
            if (check, name) in KNOWN_DEFECTS
            else [],
        )
        for name in names
    ]


@pytest.mark.parametrize(
    "name",
    _params("one_miss", [n for n in DRIVEN if CASES[n].fill == "read-through"]),
)
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
    caps = [s for s in declared(name).settings if s.endswith("_MAX_ENTRIES")]
    with contextlib.ExitStack() as stack:
        if caps:  # the layer is rebuilt from the overridden settings
            stack.enter_context(override_settings(**dict.fromkeys(caps, 3)))
        else:  # a fixed-size map in front of a table in code
            for cache in member_maps(name).values():
                monkeypatch.setattr(cache, "maxsize", 3)
        maps = member_maps(name)
        await fill(read, 15)
        sizes = {label: len(cache) for label, cache in maps.items()}
        total = registry.sizes()[name]
    assert sizes == dict.fromkeys(maps, 3)
    assert total == 3 * len(maps)


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
    with pytest.raises(ValueError):
        registry.parse_key(cache, text)


def test_webhook_keys_of_every_kind_parse() -> None:
    assert registry.parse_key("webhook", "5:7") == ("persona", 5, 7)
    assert registry.parse_key("webhook", "failed:5") == ("failed", 5)
