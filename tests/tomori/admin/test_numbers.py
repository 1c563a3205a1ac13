"""Every number on the dashboard agrees with the docs, the buttons and the other pages."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.urls import reverse

from caches import bus, live
from caches.core import BoundedTTLCache
from caches.memory.emergency import EmergencyClearResult
from caches.messages import ClearAll, ClearCache
from caches.operations import (
    WorkerContext,
    WorkerReply,
    build_worker_snapshot,
    describe_reply,
    emergency_plan,
    make_command_handler,
)
from caches.registry import EmergencyPolicy, registry
from tests.tomori.admin.conftest import TEST_CACHE
from tomori.domain.knobs import knobs

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:caches_cachecontrol_changelist"
PRESERVED = "admin_test_preserved"  # like llm: preserved, yet bus-invalidatable
EXPIRED_ONLY = "admin_test_state"  # like short_term_memory
WRITE_ONCE = "admin_test_write_once"  # like the message-keyed caches


@pytest.fixture
def policy_caches() -> Iterator[dict[str, BoundedTTLCache[int, str]]]:
    """Register one filled cache per other policy (and a write-once clearable one)."""
    specs = {
        PRESERVED: (EmergencyPolicy.PRESERVE, True),
        EXPIRED_ONLY: (EmergencyPolicy.EXPIRED_ONLY, False),
        WRITE_ONCE: (EmergencyPolicy.CLEAR, False),
    }
    caches: dict[str, BoundedTTLCache[int, str]] = {}
    for name, (policy, invalidatable) in specs.items():
        cache: BoundedTTLCache[int, str] = BoundedTTLCache(name, maxsize=10, ttl=600)
        registry.register(name, cache, policy=policy, invalidatable=invalidatable)
        cache.set(1, "one")
        caches[name] = cache
    yield caches
    for name in specs:
        registry.unregister(name)


def _rows_with_a_clear_button(html: str) -> set[str]:
    return set(
        re.findall(r'class="button small clear-cache" data-cache="([^"]+)"', html)
    )


def test_composite_caps_are_listed_per_member_map(manager_client, worker) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.get(reverse(DASHBOARD))
    [view] = response.context["workers"]
    rows = {layer.name: layer for layer in view.layers}
    state_cap = int(knobs().TOMORI_STATE_CACHE_MAX_ENTRIES)
    spotlight = int(knobs().PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES)
    gate = int(knobs().PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES)
    mcp = int(knobs().GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES)
    expected = {
        "tomori_state": [
            ("main", state_cap),
            ("last good", state_cap),
            ("errors", state_cap),
        ],
        "personal_spotlight": [("main", spotlight), ("gate", gate)],
        "guild_mcp_config": [("main", mcp), ("last good", mcp)],
    }
    for name, parts in expected.items():
        row = rows[name]
        assert [(label, cap) for label, cap, _ in row.cap_parts] == parts, name
        assert row.cap == sum(cap for _, cap in parts), name  # the cap shown is the sum
    assert rows["user"].cap_parts == []  # one map: nothing to explain
    html = response.content.decode()
    state = html[html.index('data-cache="tomori_state"') :]
    state = state[: state.index("</tr>")]
    assert f"{3 * state_cap:,}" in state
    assert f"{state_cap:,} main" in state and f"+ {state_cap:,} errors" in state


def test_clear_all_clears_exactly_the_caches_with_a_clear_button(  # type: ignore[no-untyped-def]
    manager_client, worker, test_cache, policy_caches
) -> None:
    worker.publish()
    html = manager_client.get(reverse(DASHBOARD)).content.decode()
    buttons = _rows_with_a_clear_button(html)
    assert TEST_CACHE in buttons and WRITE_ONCE in buttons
    assert (
        PRESERVED not in buttons
        and EXPIRED_ONLY not in buttons
        and "llm" not in buttons
    )
    response = manager_client.post(reverse("admin:caches_clear_all"), follow=True)
    messages = [str(m) for m in response.context["messages"]]
    assert messages[0].startswith("clear every clearable cache: 1 worker answered")
    assert len(test_cache) == 0 and len(policy_caches[WRITE_ONCE]) == 0
    assert len(policy_caches[PRESERVED]) == 1  # "preserved" means it
    assert len(policy_caches[EXPIRED_ONLY]) == 1
    # One set for the three: the row buttons, clear-all and the emergency clear.
    plan = emergency_plan()
    assert buttons == set(plan.cleared)
    command = ClearAll.issue(issued_by="t")
    reply = make_command_handler(worker.context)(command)
    assert set(reply.details["cleared"]) == buttons


def test_policy_words_match_what_the_buttons_do(  # type: ignore[no-untyped-def]
    manager_client, worker, test_cache, policy_caches
) -> None:
    worker.publish()
    response = manager_client.get(reverse(DASHBOARD))
    [view] = response.context["workers"]
    labels = {layer.name: layer.policy_label for layer in view.layers}
    assert labels[TEST_CACHE] == labels[WRITE_ONCE] == "clearable"
    assert labels[PRESERVED] == labels["llm"] == "preserved"
    assert labels[EXPIRED_ONLY] == "expired only"
    html = response.content.decode()
    assert "Clear every clearable cache" in html and "invalidatable" not in html
    preserved_reply = make_command_handler(worker.context)(
        ClearCache.issue(cache=PRESERVED, issued_by="t")
    )
    assert not preserved_reply.ok and len(policy_caches[PRESERVED]) == 1


def test_the_bus_panel_counts_every_operator_command(  # type: ignore[no-untyped-def]
    manager_client, worker, test_cache
) -> None:
    for _ in range(3):
        manager_client.post(reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE})
    manager_client.post(
        reverse("admin:caches_invalidate_key"), {"cache": TEST_CACHE, "key": "1"}
    )
    manager_client.post(reverse("admin:caches_refresh_catalogs"))
    response = manager_client.get(reverse("admin:caches_worker", args=["w1"]))
    view = response.context["worker"]
    assert view.bus["commands_run"] == 5 == worker.context.commands_run
    assert "operator commands 5" in response.content.decode()


def test_the_in_process_bus_says_so_and_counts_its_commands(  # type: ignore[no-untyped-def]
    manager_client, test_cache, settings
) -> None:
    settings.REDIS_URL = ""
    bus.get_bus()
    local = bus.configure(redis_url="", channel="tomori:bus", worker_id="embedded")
    local.start_subscriber(flush=lambda: {})
    context = WorkerContext(worker_id="embedded")

    def publish() -> None:
        snapshot = build_worker_snapshot(
            context=context, started_at=0.0, bus_status=local.snapshot()
        )
        live.publish_snapshot("embedded", snapshot)

    local.set_command_handler(make_command_handler(context, after=publish))
    publish()
    try:
        for _ in range(2):
            manager_client.post(
                reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE}
            )
        fleet = manager_client.get(reverse(DASHBOARD)).content.decode()
        url = reverse("admin:caches_worker", args=["embedded"])
        html = manager_client.get(url).content.decode()
    finally:
        live.withdraw_snapshot("embedded")
        bus.configure()
    assert "in-process (no Redis)" in html and ">connected<" not in html
    assert "operator commands 2" in html
    assert ">in-process<" in fleet and "bus down" not in fleet  # not a problem


def test_the_emergency_result_itemises_every_entry_it_removed() -> None:
    result = EmergencyClearResult(
        source="operator",
        cleared={
            "user": 120,
            "tomori_state": 40,
            "llm_never": 0,
            "short_term_memory": 27,
        },
        discord_cleared={
            "discord_messages": 1_150,
            "discord_bot_members": 3,
            "discord_presences": 30,
            "discord_voice_states": 0,
        },
    )
    reply = WorkerReply(
        worker_id="w1", ok=True, removed=result.total_cleared, details=result.as_dict()
    )
    line = describe_reply(reply)
    assert line.startswith("worker w1: removed 1,370 entries (")
    assert "discord.py messages 1,150, bot_members 3, presences 30" in line
    itemised = line[line.index("(") :]
    numbers = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", itemised)]
    assert sum(numbers) == result.total_cleared == 1_370


def test_the_memory_panel_says_when_the_limit_is_only_the_hosts(  # type: ignore[no-untyped-def]
    manager_client, worker, monkeypatch
) -> None:
    from caches.memory import MIB, readers

    host = (24_000 * MIB, "host_total")
    monkeypatch.setattr(readers, "detected_memory_limit", lambda _mb: host)
    worker.publish()
    page = reverse("admin:caches_worker", args=["w1"])
    html = manager_client.get(page).content.decode()
    assert "MB host memory" in html and "no container limit set" in html
    fleet = manager_client.get(reverse(DASHBOARD)).content.decode()
    memory = re.search(r'<td class="num memory"([^>]*)>[^<]*/ 24,000\s', fleet)
    assert memory and "the host's memory stands in" in memory.group(1)
    cgroup = (512 * MIB, "cgroup_v2")
    monkeypatch.setattr(readers, "detected_memory_limit", lambda _mb: cgroup)
    worker.publish()
    html = manager_client.get(page).content.decode()
    assert "512 MB limit" in html and "no container limit set" not in html


def test_a_rejected_post_refreshes_to_the_dashboard_not_its_own_url(  # type: ignore[no-untyped-def]
    manager_client, worker, test_cache
) -> None:
    url = reverse("admin:caches_invalidate_key")
    response = manager_client.post(url, {"cache": TEST_CACHE, "key": "forty-two"})
    assert response.status_code == 400
    html = response.content.decode()
    dashboard = reverse(DASHBOARD)
    box = re.search(r'<input type="checkbox" id="auto-refresh"[^>]*>', html)
    assert box is not None
    assert f'data-url="{dashboard}"' in box.group(0)
    assert 'data-paused="1"' in box.group(0) and "checked" not in box.group(0)
    assert "is not an integer id" in html  # the error stays in view
    assert "window.location.pathname" not in html
    assert manager_client.get(url).status_code == 405  # what the old refresh hit
    assert manager_client.get(dashboard).status_code == 200
    fine = manager_client.get(dashboard).content.decode()
    assert 'data-paused="1"' not in fine and 'id="refresh-paused"' not in fine


def test_the_admin_docs_explain_the_composite_caps_the_dashboard_shows() -> None:
    from pathlib import Path

    from tomori.domain.knobs import KNOBS_BY_NAME

    def default(name: str) -> int:
        return int(KNOBS_BY_NAME[name].default)

    admin = (Path(settings.BASE_DIR) / "docs" / "admin.md").read_text()
    state = 3 * default("TOMORI_STATE_CACHE_MAX_ENTRIES")
    mcp = 2 * default("GUILD_MCP_CONFIG_CACHE_MAX_ENTRIES")
    spotlight = default("PERSONAL_SPOTLIGHT_CACHE_MAX_ENTRIES") + default(
        "PERSONAL_SPOTLIGHT_GATE_MAX_ENTRIES"
    )
    assert f"errors: {state:,} by" in admin
    assert f"(main, last good: {mcp:,})" in admin
    assert f"(main, gate: {spotlight:,})" in admin
