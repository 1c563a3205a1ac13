"""A warm that reads the llms table while a rename commits does not keep the old row."""

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from caches import bus
from caches.layers import llm as llm_layer
from tomori.domain import models as m
from tomori.domain.repositories import llms as llms_repo

pytestmark = pytest.mark.django_db(transaction=True)


async def test_llm_warm_racing_a_commit_does_not_keep_the_old_row(monkeypatch):  # type: ignore[no-untyped-def]
    bus.configure(redis_url="", channel="tomori:test:rv")
    bus.start_subscriber(loop=asyncio.get_running_loop())
    row = await sync_to_async(m.Llm.objects.create)(
        provider="openrouter", codename="old"
    )
    read_done, release = threading.Event(), threading.Event()
    real = llms_repo.list_llms

    def slow():
        rows = real()
        read_done.set()
        release.wait(5)
        return rows

    monkeypatch.setattr(llms_repo, "list_llms", slow)
    llm_layer._layer.cache.clear()
    warm = asyncio.ensure_future(llm_layer.ensure_llm_cache())
    await asyncio.to_thread(read_done.wait, 5)

    def rename():
        r = m.Llm.objects.get(pk=row.pk)
        r.codename = "new"
        r.save()

    await asyncio.to_thread(rename)  # commits; invalidation posted to the loop
    await asyncio.sleep(0)  # let the loop apply it
    release.set()
    await warm
    await llm_layer.ensure_llm_cache()  # "a no-op unless llms rows changed"
    try:
        assert llm_layer.get_cached_llm(row.pk).codename == "new"
    finally:
        bus.configure()
