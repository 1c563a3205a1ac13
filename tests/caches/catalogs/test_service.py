"""The Django side of the catalogs: stored snapshots, the Celery task, the bus."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection

from caches import bus
from caches.catalogs import service
from caches.catalogs.fake_server import FakeOpenRouter
from caches.catalogs.service import (
    build_catalog_set,
    is_openrouter_capability_cache_ready,
    load_stored_snapshots,
    refresh_and_store,
    register_catalogs,
)
from tests.caches.catalogs.conftest import starter_catalogs, text_model
from tomori.domain.knobs import knobs
from tomori.domain.models import CatalogSnapshot
from tomori.domain.repositories.catalogs import save_catalog_snapshot
from tomori.tasks.catalogs import refresh_openrouter_catalogs

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.django_db(transaction=True)
def test_task_stores_a_snapshot_per_catalog(openrouter: FakeOpenRouter) -> None:
    catalogs = build_catalog_set(base_url=openrouter.base_url)
    outcome = refresh_and_store(force=True, catalogs=catalogs)
    assert outcome == dict.fromkeys(
        ("text", "embedding", "image", "video"), "refreshed"
    )
    counts = dict(CatalogSnapshot.objects.values_list("catalog", "model_count"))
    assert counts == {"text": 2, "embedding": 1, "image": 1, "video": 1}


@pytest.mark.django_db(transaction=True)
def test_fresh_snapshots_are_not_fetched_again(openrouter: FakeOpenRouter) -> None:
    refresh_and_store(
        force=True, catalogs=build_catalog_set(base_url=openrouter.base_url)
    )
    requests = openrouter.request_count("text")
    outcome = refresh_and_store(
        catalogs=build_catalog_set(base_url=openrouter.base_url)
    )
    assert set(outcome.values()) == {"fresh"}
    assert openrouter.request_count("text") == requests


@pytest.mark.django_db(transaction=True)
def test_failed_fetch_stores_and_announces_nothing(openrouter: FakeOpenRouter) -> None:
    save_catalog_snapshot(
        "text", [text_model("old/model")], fetched_at=datetime(2020, 1, 1, tzinfo=UTC)
    )
    openrouter.respond("text", status=503)
    openrouter.respond("video", json_body={"data": []})
    before = bus.stats()["local"]
    outcome = refresh_and_store(
        force=True, catalogs=build_catalog_set(base_url=openrouter.base_url)
    )
    assert outcome["text"] == "failed" and outcome["video"] == "failed"
    stored = CatalogSnapshot.objects.get(catalog="text")
    assert stored.payload == [text_model("old/model")]
    assert not CatalogSnapshot.objects.filter(catalog="video").exists()
    assert bus.stats()["local"] - before == 2  # embedding and image only


@pytest.mark.django_db(transaction=True)
async def test_worker_with_a_stored_snapshot_and_a_dead_server_is_ready_at_once() -> (
    None
):
    from asgiref.sync import sync_to_async

    await sync_to_async(save_catalog_snapshot)(
        "text", [text_model("openai/gpt-4o")], fetched_at=datetime.now(UTC)
    )
    catalogs = build_catalog_set(base_url="http://127.0.0.1:9/api/v1")
    register_catalogs(catalogs, loop=asyncio.get_running_loop())
    try:
        assert not is_openrouter_capability_cache_ready()
        assert await load_stored_snapshots(catalogs) == {"text": True}
        assert catalogs.text.is_ready() and is_openrouter_capability_cache_ready()
        assert catalogs.text.get(" OpenAI/GPT-4o ") is not None
        assert catalogs.text.status()["fetches"] == 0
    finally:
        await catalogs.aclose()


@pytest.mark.django_db(transaction=True)
async def test_announced_snapshot_is_swapped_into_a_subscribed_worker() -> None:
    from asgiref.sync import sync_to_async

    catalogs = build_catalog_set(base_url="http://127.0.0.1:9/api/v1")
    register_catalogs(catalogs, loop=asyncio.get_running_loop())
    assert catalogs.text.get("new/model") is None
    async with FakeOpenRouter(catalogs=starter_catalogs()) as fake:
        fake.add_model("text", text_model("new/model"))
        fetcher = build_catalog_set(base_url=fake.base_url)
        await sync_to_async(refresh_and_store, thread_sensitive=False)(
            force=True, catalogs=fetcher
        )

    # The announcement starts a reload task on this loop, its read in the
    # database thread: wait for that task itself (bounded), not loop turns.
    async def reloaded() -> None:
        while catalogs.text.get("new/model") is None:
            if service._reloads:
                await asyncio.gather(*service._reloads)
            else:
                await asyncio.sleep(0)  # the announcement, queued on this loop

    await asyncio.wait_for(reloaded(), 10)
    assert catalogs.text.get("new/model") is not None
    await catalogs.aclose()


@pytest.mark.django_db(transaction=True)
def test_beat_task_runs_eagerly_through_celery(
    openrouter: FakeOpenRouter, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.OPENROUTER_BASE_URL = openrouter.base_url
    refresh_openrouter_catalogs.apply(kwargs={"force": True})
    assert CatalogSnapshot.objects.count() == 4


def test_beat_schedule_runs_the_refresh_every_quarter_ttl(settings) -> None:  # type: ignore[no-untyped-def]
    entry = settings.CELERY_BEAT_SCHEDULE["refresh-openrouter-catalogs"]
    assert entry["task"] == "caches.refresh_openrouter_catalogs"
    assert entry["schedule"] == max(60.0, knobs().OPENROUTER_CATALOG_TTL_MS / 4000)


@pytest.mark.django_db(transaction=True)
def test_real_celery_worker_refreshes_and_the_bus_announces_it(
    openrouter: FakeOpenRouter, redis_url: str, postgres: None
) -> None:
    from tomori.celery import app

    test_bus = bus.configure(redis_url=redis_url)
    test_bus.start_subscriber()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": _test_database_url(),
        "REDIS_URL": redis_url,
        "OPENROUTER_BASE_URL": openrouter.base_url,
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tomori",
            "worker",
            "--pool",
            "solo",
            "--concurrency",
            "1",
            "-Q",
            "tomori-test",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        app.send_task(
            "caches.refresh_openrouter_catalogs",
            kwargs={"force": True},
            queue="tomori-test",
        )
        assert bus.wait_for(lambda s: s.get("applied", 0) >= 4, timeout=60)
        assert CatalogSnapshot.objects.count() == 4
    finally:
        worker.terminate()
        worker.wait(10)
        bus.configure()


def _test_database_url() -> str:
    params = connection.settings_dict
    return f"postgres://{params['USER'] or 'postgres'}@{params['HOST'] or '127.0.0.1'}:{params['PORT'] or 5432}/{params['NAME']}"
