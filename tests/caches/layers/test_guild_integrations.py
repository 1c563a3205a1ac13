"""Guild MCP config, ST preset and NovelAI subscription layers."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from caches.layers import guild_mcp_config, novelai_subscription, st_preset
from caches.layers.guild_mcp_config import get_cached_guild_mcp_configs
from caches.layers.novelai_subscription import get_cached_novelai_subscription
from caches.layers.st_preset import get_cached_st_preset
from caches.registry import registry
from tomori.domain.repositories import integrations as integrations_repo
from tomori.domain.repositories import presets as presets_repo
from tomori.domain.repositories.presets import StPresetNodeRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def server(make_server):
    return make_server()


# ------------------------------------------------------------------ MCP


@pytest.fixture
def mcp(server):
    config = integrations_repo.guild_mcp_config_upsert(
        server_id=server.id, name="search", url="https://mcp.example/search"
    )
    integrations_repo.guild_mcp_config_set_tool_names(
        config_id=config.id, tool_names=["web_search", "fetch"]
    )
    return config


def test_mcp_configs_are_fresh_and_cached(run, server, mcp, django_assert_num_queries):
    got = run(get_cached_guild_mcp_configs, server.id)
    assert got.provenance == "fresh"
    assert [c.tool_names for c in got.configs] == [("web_search", "fetch")]
    with django_assert_num_queries(0):
        assert run(get_cached_guild_mcp_configs, server.id) is got


def test_mcp_failed_reload_serves_the_old_entry_as_stale(
    run, server, mcp, db_down, clock
):
    fresh = run(get_cached_guild_mcp_configs, server.id)
    clock.advance(10 * 60 + 1)
    db_down(integrations_repo, "list_guild_mcp_configs")
    stale = run(get_cached_guild_mcp_configs, server.id)
    assert stale.provenance == "stale" and stale.configs == fresh.configs
    assert len(guild_mcp_config._layer.fresh) == 0
    assert registry.stats()["guild_mcp_config"]["members"] == {
        "primary": 0,
        "last_good": 1,
    }


def test_mcp_failed_first_load_is_unavailable(run, server, db_down):
    db_down(integrations_repo, "list_guild_mcp_configs")
    got = run(get_cached_guild_mcp_configs, server.id)
    assert got.provenance == "unavailable" and got.configs == ()
    assert len(guild_mcp_config._layer.cache) == 0


def test_mcp_key_op_reloads_new_tool_names(run, server, mcp):
    run(get_cached_guild_mcp_configs, server.id)
    changed = integrations_repo.guild_mcp_config_set_tool_names(
        config_id=mcp.id, tool_names=["fetch"]
    )
    assert changed
    # The fresh entry only: the last good copy stays for a failed reload.
    assert registry.apply("guild_mcp_config", "key", server.id) == 1
    got = run(get_cached_guild_mcp_configs, server.id)
    assert got.configs[0].tool_names == ("fetch",) and got.provenance == "fresh"


def test_mcp_unchanged_tool_names_write_nothing(mcp):
    assert not integrations_repo.guild_mcp_config_set_tool_names(
        config_id=mcp.id, tool_names=["web_search", "fetch"]
    )


def test_mcp_invalidated_entry_is_served_stale_when_its_reload_fails(
    run, server, mcp, db_down
):
    before = run(get_cached_guild_mcp_configs, server.id)
    registry.apply("guild_mcp_config", "key", server.id)
    db_down(integrations_repo, "list_guild_mcp_configs")
    got = run(get_cached_guild_mcp_configs, server.id)
    assert got.provenance == "stale" and got.configs == before.configs
    assert registry.stats()["guild_mcp_config"]["stale_entries"] == 1


def test_mcp_never_loaded_guild_is_unavailable_when_the_database_fails(
    run, server, db_down
):
    db_down(integrations_repo, "list_guild_mcp_configs")
    assert run(get_cached_guild_mcp_configs, server.id).provenance == "unavailable"


# ------------------------------------------------------------------ ST preset


def test_st_preset_with_nodes_is_cached(run, server, django_assert_num_queries):
    presets_repo.st_preset_create(
        server_id=server.id,
        name="Roleplay",
        nodes=[
            StPresetNodeRecord(1, "system", "second", True),
            StPresetNodeRecord(0, "system", "first", True),
        ],
        activate=True,
    )
    got = run(get_cached_st_preset, server.id)
    assert got.name == "Roleplay"
    assert [n.content for n in got.nodes] == ["first", "second"]
    with django_assert_num_queries(0):
        assert run(get_cached_st_preset, server.id) is got


def test_no_active_preset_is_a_negative_entry(run, server, django_assert_num_queries):
    presets_repo.st_preset_create(server_id=server.id, name="Inactive")
    assert run(get_cached_st_preset, server.id) is None
    with django_assert_num_queries(0):
        assert run(get_cached_st_preset, server.id) is None


def test_st_preset_expires_and_key_op(run, server, count_calls, clock):
    loads = count_calls(presets_repo, "get_active_st_preset")
    run(get_cached_st_preset, server.id)
    clock.advance(10 * 60 + 1)
    run(get_cached_st_preset, server.id)
    assert loads.calls == 2
    assert registry.apply("st_preset", "key", server.id) == 1


def test_st_preset_database_error_caches_nothing(run, server, db_down):
    db_down(presets_repo, "get_active_st_preset")
    with pytest.raises(OperationalError):
        run(get_cached_st_preset, server.id)
    assert len(st_preset._layer.cache) == 0


# ------------------------------------------------------------------ NovelAI


def test_novelai_subscription_is_cached_for_a_day(run, server, count_calls, clock):
    integrations_repo.novelai_subscription_set(
        server_id=server.id, tier="opus", context_limit=8192
    )
    loads = count_calls(integrations_repo, "get_novelai_subscription")
    got = run(get_cached_novelai_subscription, server.id)
    assert (got.tier, got.context_limit) == ("opus", 8192)
    clock.advance(24 * 3600 - 1)
    run(get_cached_novelai_subscription, server.id)
    assert loads.calls == 1
    clock.advance(2)
    run(get_cached_novelai_subscription, server.id)
    assert loads.calls == 2


def test_novelai_no_subscription_is_negative(run, server, django_assert_num_queries):
    assert run(get_cached_novelai_subscription, server.id) is None
    with django_assert_num_queries(0):
        assert run(get_cached_novelai_subscription, server.id) is None
    assert registry.apply("novelai_subscription", "key", server.id) == 1


def test_novelai_database_error_caches_nothing(run, server, db_down):
    db_down(integrations_repo, "get_novelai_subscription")
    with pytest.raises(OperationalError):
        run(get_cached_novelai_subscription, server.id)
    assert len(novelai_subscription._layer.cache) == 0
