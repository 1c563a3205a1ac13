"""The cache dashboard: who sees what, POST + CSRF, form errors, and answers from a worker."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from caches import bus, live
from caches.models import CacheControl
from caches.operations import WorkerContext, build_worker_snapshot, make_command_handler
from metrics.models import MetricSample
from tests.tomori.admin.conftest import TEST_CACHE
from tomori.domain import models as m

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:caches_cachecontrol_changelist"


def worker_page(worker_id: str) -> str:
    return reverse("admin:caches_worker", args=[worker_id])


ACTIONS = {
    "admin:caches_clear_cache": {"cache": TEST_CACHE},
    "admin:caches_invalidate_key": {"cache": TEST_CACHE, "key": "3"},
    "admin:caches_clear_all": {},
    "admin:caches_refresh_catalogs": {},
    "admin:caches_emergency_clear": {},
}


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(message) for message in response.context["messages"]]


def test_anonymous_users_are_sent_to_the_login_page() -> None:
    client = Client()
    for name in [DASHBOARD, *ACTIONS]:
        response = (
            client.post(reverse(name)) if name in ACTIONS else client.get(reverse(name))
        )
        assert response.status_code == 302
        assert reverse("admin:login") in response["Location"]


def test_dashboard_shows_each_layer_of_the_live_worker(
    manager_client, worker, test_cache
) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-worker="w1"' in html and '<td class="num shards">0, 1</td>' in html
    assert f'href="{worker_page("w1")}"' in html  # the row opens the worker's page
    [entry] = [e for e in response.context["fleet_caches"] if e.name == TEST_CACHE]
    assert (entry.total.size, entry.caps, entry.max_fill) == (5, [10], 50.0)
    assert f'data-cache="{TEST_CACHE}"' in html
    assert "Clear every clearable cache" in html and "Invalidate key" in html

    page = manager_client.get(worker_page("w1"))
    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-worker="w1"' in text and "shards 0, 1" in text
    row = next(
        layer for layer in page.context["worker"].layers if layer.name == TEST_CACHE
    )
    assert (row.size, row.cap, row.fill_percent, row.policy) == (5, 10, 50.0, "clear")
    assert f'data-cache="{TEST_CACHE}"' in text
    assert "connected" in text  # bus health panel


def test_population_is_shown_beside_resident_size(manager_client, worker) -> None:  # type: ignore[no-untyped-def]
    for disc_id, key in [(11, "k1"), (12, "k2"), (13, None)]:
        server = m.Server.objects.create(server_disc_id=disc_id, name=f"s{disc_id}")
        m.ServerModelConfig.objects.create(server=server, api_key=key)
    worker.publish()
    response = manager_client.get(worker_page("w1"))
    view = response.context["worker"]
    state = next(layer for layer in view.layers if layer.name == "tomori_state")
    assert state.size == 0
    assert state.population is not None and state.population.count == 2
    assert "configured servers" in response.content.decode()
    page = manager_client.get(reverse("admin:caches_cache", args=["tomori_state"]))
    assert "2 configured servers" in page.content.decode()


def test_staff_without_the_permission_sees_no_buttons_and_gets_403(
    staff_client, worker, test_cache
) -> None:  # type: ignore[no-untyped-def]
    response = staff_client.get(reverse(DASHBOARD))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'data-cache="{TEST_CACHE}"' in html
    assert 'id="clear-all"' not in html  # the legend still names the button
    assert reverse("admin:caches_clear_cache") not in html
    assert '<form method="post"' not in html
    for name, data in ACTIONS.items():
        assert staff_client.post(reverse(name), data).status_code == 403
    assert staff_client.get(reverse("admin:caches_emergency_clear")).status_code == 403
    assert len(test_cache) == 5


def test_get_never_changes_a_cache(manager_client, worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    assert manager_client.get(reverse(DASHBOARD)).status_code == 200
    assert (
        manager_client.get(reverse("admin:caches_emergency_clear")).status_code == 200
    )
    for name in ACTIONS:
        if name != "admin:caches_emergency_clear":
            assert manager_client.get(reverse(name), ACTIONS[name]).status_code == 405
    assert len(test_cache) == 5
    assert not LogEntry.objects.exists()


def test_posts_need_the_csrf_token(manager, worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    client = Client(enforce_csrf_checks=True)
    client.force_login(manager)
    for name, data in ACTIONS.items():
        assert client.post(reverse(name), data).status_code == 403
    assert len(test_cache) == 5
    client.get(reverse(DASHBOARD))
    token = client.cookies["csrftoken"].value
    response = client.post(
        reverse("admin:caches_clear_cache"),
        {"cache": TEST_CACHE, "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302
    assert len(test_cache) == 0


def test_a_bad_key_is_a_form_error(manager_client, worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(
        reverse("admin:caches_invalidate_key"),
        {"cache": TEST_CACHE, "key": "not-a-number"},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "is not an integer id" in html and "an integer id, e.g. 42" in html
    assert len(test_cache) == 5
    assert not LogEntry.objects.exists()


def test_an_unknown_cache_is_a_form_error(manager_client, worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(
        reverse("admin:caches_invalidate_key"), {"cache": "no_such_cache", "key": "1"}
    )
    assert response.status_code == 400
    assert "no_such_cache" in response.content.decode()
    response = manager_client.post(
        reverse("admin:caches_clear_cache"), {"cache": "no_such_cache"}
    )
    assert response.status_code == 400
    assert "unknown cache &#x27;no_such_cache&#x27;" in response.content.decode()
    assert len(test_cache) == 5


def test_clear_cache_reaches_the_worker_and_reports_its_answer(
    manager_client, manager, worker, test_cache
) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(
        reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE}, follow=True
    )
    assert len(test_cache) == 0
    messages = _messages(response)
    assert (
        f"clear cache {TEST_CACHE}: 1 worker answered, 5 entries removed in total."
        in messages
    )
    assert "worker w1 (shards 0, 1): removed 5 entries" in messages
    [view] = response.context["workers"]  # the worker republished after the command
    assert next(layer for layer in view.layers if layer.name == TEST_CACHE).size == 0
    entry = LogEntry.objects.get()
    assert entry.user == manager
    assert entry.content_type == ContentType.objects.get_for_model(
        CacheControl, for_concrete_model=False
    )
    assert entry.object_repr == f"cache dashboard: clear cache {TEST_CACHE}"
    assert "removed 5 entries" in entry.change_message


def test_invalidate_key_drops_only_that_key(manager_client, worker, test_cache) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(
        reverse("admin:caches_invalidate_key"),
        {"cache": TEST_CACHE, "key": " 3 "},
        follow=True,
    )
    assert sorted(test_cache.keys()) == [1, 2, 4, 5]
    assert "worker w1 (shards 0, 1): removed 1 entry" in _messages(response)


def test_clear_all_clears_every_invalidatable_cache(
    manager_client, worker, test_cache
) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(reverse("admin:caches_clear_all"), follow=True)
    assert len(test_cache) == 0
    assert any(f"({TEST_CACHE} 5)" in line for line in _messages(response))


def test_emergency_clear_confirms_then_runs(
    manager_client, worker, test_cache, _no_metric_rows
) -> None:  # type: ignore[no-untyped-def]
    page = manager_client.get(reverse("admin:caches_emergency_clear"))
    assert page.status_code == 200
    plan = page.context["plan"]
    assert TEST_CACHE in plan.cleared and "short_term_memory" in plan.expired_only
    assert "llm" in plan.preserved
    html = page.content.decode()
    assert "Preserved" in html and "Only expired entries swept" in html
    assert len(test_cache) == 5
    response = manager_client.post(reverse("admin:caches_emergency_clear"), follow=True)
    assert len(test_cache) == 0
    assert "emergency clear: 1 worker answered" in " ".join(_messages(response))
    [(name, fields)] = _no_metric_rows
    assert name == "emergency_cache_clear" and fields["source"] == "operator"


def test_reload_catalogs_refreshes_each_catalog(manager_client, worker) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(
        reverse("admin:caches_refresh_catalogs"), {"fresh": "on"}, follow=True
    )
    assert [c.calls for c in worker.context.catalogs] == [[True], [True]]
    assert "worker w1 (shards 0, 1): catalogs: text ok, embedding ok" in _messages(
        response
    )


def test_no_worker_answered_is_reported(
    manager_client, bus_channel, test_cache
) -> None:  # type: ignore[no-untyped-def]
    response = manager_client.post(
        reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE}, follow=True
    )
    assert any("no worker answered" in line for line in _messages(response))
    assert "no worker answered" in LogEntry.objects.get().change_message


def test_without_live_workers_the_last_sample_and_its_age_are_shown(
    manager_client,
) -> None:  # type: ignore[no-untyped-def]
    MetricSample.objects.create(
        metric_name="cache_sizes",
        fields={"worker_id": "w9", "user": 321, "discord_members": 7, "rss_mb": 88.5},
        created_at=timezone.now() - timedelta(minutes=12),
    )
    response = manager_client.get(reverse(DASHBOARD))
    html = response.content.decode()
    assert "No bot worker is live" in html
    assert "12 min old" in html and "321" in html
    assert response.context["last_sample"].sizes == {"user": 321}


def test_without_workers_or_samples_the_dashboard_says_so(manager_client) -> None:  # type: ignore[no-untyped-def]
    html = manager_client.get(reverse(DASHBOARD)).content.decode()
    assert (
        "No bot worker is live" in html and "No <code>cache_sizes</code> sample" in html
    )


def test_a_domain_save_lists_the_caches_it_invalidated(admin_client) -> None:  # type: ignore[no-untyped-def]
    server = m.Server.objects.create(server_disc_id=4242, name="alpha")
    url = reverse("admin:tomori_server_change", args=[server.pk])
    page = admin_client.get(url)
    form = page.context["adminform"].form
    data = {
        name: form[name].value()
        for name in form.fields
        if form[name].value() is not None
    }
    data.update(name="renamed")
    for formset in page.context["inline_admin_formsets"]:
        management = formset.formset.management_form
        for name in management.fields:
            data[f"{management.prefix}-{name}"] = management[name].value()
    response = admin_client.post(url, data, follow=True)
    assert response.status_code == 200
    messages = " ".join(_messages(response))
    assert (
        "Caches invalidated by this save: tomori_state (Tomori state of server 4242)"
        in messages
    )


def test_the_in_process_bus_of_the_embedded_default_works_too(  # type: ignore[no-untyped-def]
    manager_client, test_cache, settings
) -> None:
    settings.REDIS_URL = (
        ""  # embedded default: one process, in-process bus and snapshots
    )
    bus.get_bus()
    local = bus.configure(redis_url="", channel="tomori:bus", worker_id="embedded")
    context = WorkerContext(worker_id="embedded")
    local.set_command_handler(make_command_handler(context))
    live.publish_snapshot(
        "embedded", build_worker_snapshot(context=context, started_at=0.0)
    )
    try:
        response = manager_client.post(
            reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE}, follow=True
        )
    finally:
        live.withdraw_snapshot("embedded")
        bus.configure()
    assert len(test_cache) == 0
    assert "worker embedded: removed 5 entries" in _messages(response)


def test_dashboard_counts_entries_served_stale_after_a_failed_reload(
    manager_client, worker, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from asgiref.sync import async_to_sync
    from django.db import OperationalError

    from caches.layers import tomori_state
    from tests.caches.layers.fakes import tomori_rows

    async def read(_fn, server_disc_id):  # type: ignore[no-untyped-def]
        return tomori_rows(server_disc_id)

    async def down(*_args):  # type: ignore[no-untyped-def]
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(tomori_state, "run_db", read)
    async_to_sync(tomori_state.get_cached_tomori_state)(42)
    tomori_state.invalidate_tomori_state_cache(42)
    monkeypatch.setattr(tomori_state, "run_db", down)
    assert async_to_sync(tomori_state.get_cached_tomori_state)(42) is not None
    worker.publish()

    response = manager_client.get(reverse(DASHBOARD))
    [view] = response.context["workers"]
    stale = {layer.name: layer.stale_entries for layer in view.layers}
    assert stale["tomori_state"] == 1 and stale["user"] == 0
    assert 'class="num stale warn-text">1</td>' in response.content.decode()


def test_recent_turns_and_consistency_are_shown_per_worker(  # type: ignore[no-untyped-def]
    manager_client, settings
) -> None:
    settings.REDIS_URL = ""
    context = WorkerContext(worker_id="turns")
    snapshot = build_worker_snapshot(context=context, started_at=0.0)
    recent_turns = [
        {
            "at": 1.0,
            "server_disc_id": 123,
            "channel_disc_id": 456,
            "persona": "Renamed Tomori",
            "outcome": "ok",
            "latency_ms": 0.25,
            "missed": ["tomori_state"],
            "stale": [],
        }
    ]
    consistency = {
        "tomori_state": {
            "checked": 9,
            "inconsistent": 1,
            "repairs": 1,
            "ratio": 0.9,
            "nines": 1.0,
        },
        "user": {
            "checked": 5,
            "inconsistent": 0,
            "repairs": 0,
            "ratio": 1.0,
            "nines": 9.0,
        },
    }
    snapshot = dataclasses.replace(
        snapshot, recent_turns=tuple(recent_turns), consistency=consistency
    )
    live.publish_snapshot("turns", snapshot)
    try:
        fleet = manager_client.get(reverse(DASHBOARD)).content.decode()
        page = manager_client.get(worker_page("turns")).content.decode()
    finally:
        live.withdraw_snapshot("turns")
    assert "Recent turns" not in fleet  # a worker's own page holds them
    assert "1 inconsistency found" in fleet  # the fleet marks the worker
    assert "Recent turns" in page and "Renamed Tomori" in page
    assert "tomori_state" in page and "0.25 ms" in page
    assert "Consistency" in page and "0.900000" in page
    assert '<th class="num">repairs</th>' in page
    assert (
        '<td class="num">1</td><td class="num">1</td>' in page
    )  # inconsistent, repairs
    assert '9.0 <span class="muted">(cap)</span>' in page  # a perfect record: the cap


def test_a_cache_shows_the_bytes_its_entries_hold(  # type: ignore[no-untyped-def]
    manager_client, settings, test_cache
) -> None:
    from types import SimpleNamespace

    from tomori.bot.worker import BotWorker

    settings.REDIS_URL = ""
    context = WorkerContext(worker_id="bytes")
    snapshot = build_worker_snapshot(context=context, started_at=0.0)
    estimates = {TEST_CACHE: 3 * 2**20, "absent": 1}
    holder = SimpleNamespace(cache_bytes=SimpleNamespace(estimates=estimates))
    snapshot = BotWorker._add_bytes_estimates(holder, snapshot)  # type: ignore[arg-type]
    assert snapshot.caches[TEST_CACHE].bytes_estimate == 3 * 2**20
    assert "absent" not in snapshot.caches
    live.publish_snapshot("bytes", snapshot)
    try:
        page = manager_client.get(worker_page("bytes")).content.decode()
        fleet = manager_client.get(reverse("admin:caches_cache", args=[TEST_CACHE]))
    finally:
        live.withdraw_snapshot("bytes")
    assert "≈ 3.0\xa0MB" in page or "≈ 3.0 MB" in page
    assert "≈ 3.0\xa0MB" in fleet.content.decode()  # the per-worker row and the total


def test_a_malformed_worker_snapshot_is_left_out_and_logged(  # type: ignore[no-untyped-def]
    manager_client, worker, redis_url, caplog
) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        client.set(live.key_prefix() + "broken", b'{"worker_id": 7}', px=60_000)
        client.set(live.key_prefix() + "garbage", b"not json", px=60_000)
        response = manager_client.get(reverse(DASHBOARD))
    finally:
        client.delete(live.key_prefix() + "broken", live.key_prefix() + "garbage")
        client.close()
    assert response.status_code == 200
    assert [view.worker_id for view in response.context["workers"]] == ["w1"]
    assert caplog.text.count("dropped a malformed worker snapshot") == 2
