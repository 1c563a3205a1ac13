"""The fleet at a glance: a row per worker and per cache, a page per worker, commands to one worker."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from caches import bus, live
from caches.core import BoundedTTLCache
from caches.layers._support import parse_int
from caches.operations import WorkerContext, make_command_handler
from caches.registry import CacheRegistry, EmergencyPolicy
from tests.tomori.admin.conftest import TEST_CACHE, Worker

pytestmark = pytest.mark.django_db

DASHBOARD = "admin:caches_cachecontrol_changelist"
ENTRIES = 5


def worker_page(worker_id: str) -> str:
    return reverse("admin:caches_worker", args=[worker_id])


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(message) for message in response.context["messages"]]


class FleetWorker(Worker):
    """A stand-in worker whose caches are its own (its registry, not this process's)."""

    cache: BoundedTTLCache[int, str]


@pytest.fixture
def make_worker(
    redis_url: str, bus_channel: str
) -> Iterator[Callable[[str], FleetWorker]]:
    """Start stand-in workers on the test bus, each holding TEST_CACHE with five entries."""
    started: list[FleetWorker] = []

    def start(worker_id: str) -> FleetWorker:
        registry = CacheRegistry()
        cache: BoundedTTLCache[int, str] = BoundedTTLCache(TEST_CACHE, maxsize=10)
        registry.register(
            TEST_CACHE,
            cache,
            policy=EmergencyPolicy.CLEAR,
            description="A cache the fleet tests fill.",
            parse_key=parse_int,
        )
        for key in range(ENTRIES):
            cache.set(key, "v")
        context = WorkerContext(
            worker_id=worker_id, shard_ids=[len(started)], registry=registry
        )
        worker_bus = bus.Bus(redis_url=redis_url, channel=bus_channel)
        stand_in = FleetWorker(context=context, bus=worker_bus)
        stand_in.cache = cache
        worker_bus.set_command_handler(
            make_command_handler(context, after=stand_in.publish)
        )
        worker_bus.start_subscriber(flush=lambda: {})
        assert worker_bus.stats.wait_for(lambda s: s["flushes"] >= 1, timeout=5)
        stand_in.publish()
        started.append(stand_in)
        return stand_in

    yield start
    for stand_in in started:
        stand_in.bus.close()
        live.withdraw_snapshot(stand_in.context.worker_id)


def test_the_fleet_has_a_row_per_worker_linking_to_its_page(
    manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    make_worker("w1"), make_worker("w2")
    response = manager_client.get(reverse(DASHBOARD))
    html = response.content.decode()
    assert [row.worker.worker_id for row in response.context["worker_rows"]] == [
        "w1",
        "w2",
    ]
    for worker_id in ("w1", "w2"):
        assert f'data-worker="{worker_id}"' in html
        assert f'href="{worker_page(worker_id)}"' in html
    [entry] = [e for e in response.context["fleet_caches"] if e.name == TEST_CACHE]
    assert entry.total.size == 2 * ENTRIES and len(entry.per_worker) == 2
    # The description is in the name's title, not a line of its own.
    assert 'title="A cache the fleet tests fill."' in html
    assert '<div class="desc">' not in html


def test_clearing_a_cache_on_one_worker_leaves_the_others(
    manager_client: Client, manager, make_worker
) -> None:  # type: ignore[no-untyped-def]
    w1, w2 = make_worker("w1"), make_worker("w2")
    response = manager_client.post(
        reverse("admin:caches_clear_cache"),
        {"cache": TEST_CACHE, "worker": "w2"},
        follow=True,
    )
    assert len(w2.cache) == 0 and len(w1.cache) == ENTRIES
    assert (w1.context.commands_run, w2.context.commands_run) == (0, 1)
    assert response.redirect_chain == [(worker_page("w2"), 302)]
    messages = _messages(response)
    assert messages[0] == (
        f"clear cache {TEST_CACHE} on worker w2: worker w2 answered, "
        f"{ENTRIES} entries removed."
    )
    assert f"worker w2 (shards 1): removed {ENTRIES} entries" in messages
    entry = LogEntry.objects.get()
    assert entry.user == manager
    assert (
        entry.object_repr == f"cache dashboard: clear cache {TEST_CACHE} on worker w2"
    )


def test_the_worker_page_sends_its_buttons_to_that_worker(
    manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    make_worker("w1")
    html = manager_client.get(worker_page("w1")).content.decode()
    forms = re.findall(r'<form method="post".*?</form>', html, re.S)
    assert forms, "the page has buttons"
    assert all('name="worker" value="w1"' in form for form in forms)
    emergency = reverse("admin:caches_emergency_clear") + "?worker=w1"
    assert f'href="{emergency}"' in html


def test_the_emergency_clear_of_one_worker_asks_then_runs_there_alone(
    manager_client: Client, make_worker, _no_metric_rows
) -> None:  # type: ignore[no-untyped-def]
    w1, w2 = make_worker("w1"), make_worker("w2")
    url = reverse("admin:caches_emergency_clear")
    page = manager_client.get(url, {"worker": "w2"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "worker w2 alone" in html
    assert '<input type="hidden" name="worker" value="w2"' in html
    response = manager_client.post(url, {"worker": "w2"}, follow=True)
    assert response.redirect_chain == [(worker_page("w2"), 302)]
    assert _messages(response)[0].startswith(
        "emergency clear on worker w2: worker w2 answered"
    )
    assert (w1.context.commands_run, w2.context.commands_run) == (0, 1)
    assert len(_no_metric_rows) == 1  # one emergency clear ran, not two


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("admin:caches_clear_cache", {"cache": TEST_CACHE}),
        ("admin:caches_clear_all", {}),
        ("admin:caches_emergency_clear", {}),
    ],
)
def test_a_worker_that_is_not_live_is_a_400_and_nothing_is_sent(
    name: str, data: dict[str, str], manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    w1 = make_worker("w1")
    response = manager_client.post(reverse(name), {**data, "worker": "gone"})
    assert response.status_code == 400
    [error] = [m for m in _messages(response) if m.startswith("Nothing was sent")]
    assert "worker 'gone' is not live" in error and "live workers: w1" in error
    assert w1.context.commands_run == 0 and len(w1.cache) == ENTRIES
    assert not LogEntry.objects.exists()
    page = manager_client.get(
        reverse("admin:caches_emergency_clear"), {"worker": "gone"}
    )
    assert page.status_code == 400


def test_a_rejected_command_for_a_live_worker_stays_on_its_page(
    manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    w1 = make_worker("w1")
    response = manager_client.post(
        reverse("admin:caches_clear_cache"), {"cache": "no_such", "worker": "w1"}
    )
    assert response.status_code == 400
    assert response.context["worker"].worker_id == "w1"  # its page, not the fleet's
    assert any("unknown cache 'no_such'" in m for m in _messages(response))
    assert w1.context.commands_run == 0


def test_a_worker_page_of_a_worker_that_is_not_live_is_a_404_saying_so(
    manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    make_worker("w1")
    response = manager_client.get(worker_page("host:123:shard7"))
    assert response.status_code == 404
    html = response.content.decode()
    assert "Worker host:123:shard7 is not live" in html
    assert f'href="{worker_page("w1")}"' in html  # the live ones, to go to
    missing = manager_client.get(reverse("admin:caches_cache", args=["no_such"]))
    assert missing.status_code == 404
    assert "No live worker holds a cache named no_such" in missing.content.decode()


def test_a_worker_with_a_problem_sorts_first_and_is_marked(
    manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    make_worker("a-healthy")
    troubled = make_worker("z-troubled")
    troubled.bus.stop()  # its subscriber is gone: the bus is down
    assert troubled.bus.stats.wait_for(lambda s: not s["connected"], timeout=5)
    troubled.publish()
    response = manager_client.get(reverse(DASHBOARD))
    rows = response.context["worker_rows"]
    assert [(r.worker.worker_id, r.level) for r in rows] == [
        ("z-troubled", "danger"),
        ("a-healthy", "ok"),
    ]
    html = response.content.decode()
    row = html[html.index('data-worker="z-troubled"') :]
    row = row[: row.index("</tr>")]
    assert "bus down" in row and 'alt="problem"' in row
    assert "1 with a problem" in html


def test_empty_figures_say_what_they_mean(manager_client: Client, make_worker) -> None:  # type: ignore[no-untyped-def]
    make_worker("fresh")  # nothing applied, looked up or checked yet
    fleet = manager_client.get(reverse(DASHBOARD)).content.decode()
    page = manager_client.get(worker_page("fresh")).content.decode()
    assert "no invalidation applied yet" in page
    assert 'title="no invalidation applied yet">none yet<' in fleet
    assert ">no lookups<" in fleet and "no lookups yet" in page
    for html in (fleet, page):
        assert not re.search(r"—\s*(ms|%|MB)", html), "a dash and a unit"


def test_answers_from_many_workers_are_grouped(
    manager_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    for n in range(6):
        make_worker(f"w{n}")
    response = manager_client.post(
        reverse("admin:caches_clear_cache"), {"cache": TEST_CACHE}, follow=True
    )
    messages = _messages(response)
    assert messages[0].startswith(f"clear cache {TEST_CACHE}: 6 workers answered")
    assert messages[1:] == [
        f"6 workers (w0, w1, w2, w3, w4, w5): removed {ENTRIES} entries"
    ]
    # The admin log keeps every worker's own line.
    assert LogEntry.objects.get().change_message.count("removed 5 entries") == 6


def test_staff_without_the_permission_see_a_workers_page_without_buttons(
    staff_client: Client, make_worker
) -> None:  # type: ignore[no-untyped-def]
    w1 = make_worker("w1")
    page = staff_client.get(worker_page("w1"))
    assert page.status_code == 200
    html = page.content.decode()
    assert '<form method="post"' not in html and "?worker=w1" not in html
    data = {"cache": TEST_CACHE, "worker": "w1"}
    assert (
        staff_client.post(reverse("admin:caches_clear_cache"), data).status_code == 403
    )
    assert (
        staff_client.get(reverse("admin:caches_cache", args=[TEST_CACHE])).status_code
        == 200
    )
    assert len(w1.cache) == ENTRIES
