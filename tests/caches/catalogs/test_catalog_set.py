"""The set of four catalogs: warm order, stale refresh, status and the text readers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from caches.catalogs import CatalogSet, Pricing, TokenLimits
from caches.catalogs.fake_server import FakeOpenRouter
from caches.catalogs.samples import sample_catalogs
from caches.core import FakeClock
from tests.caches.catalogs.conftest import MIN_INTERVAL, TTL, basic_model

MakeCatalogs = Callable[..., CatalogSet]
OTHERS = ("embedding", "image", "video")


async def test_warm_fetches_text_first_then_the_others_in_parallel(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs()
    for name in ("text", *OTHERS):
        server.hold(name)
    warming = asyncio.create_task(catalogs.warm())
    await server.wait_for_requests("text")
    assert [server.request_count(name) for name in OTHERS] == [0, 0, 0]

    server.release("text")
    for name in OTHERS:  # all three arrive while every one of them is held
        await server.wait_for_requests(name)
    for name in OTHERS:
        server.release(name)

    assert await warming == {
        "text": True,
        "embedding": True,
        "image": True,
        "video": True,
    }
    assert [r.catalog for r in server.requests][0] == "text"


async def test_a_failed_warm_does_not_raise_and_recovers_on_a_later_miss(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    server.respond("image", status=500)
    server.respond("text", status=503)

    results = await catalogs.warm()

    assert results == {"text": False, "embedding": True, "image": False, "video": True}
    server.publish("image", [basic_model("acme/painter")])
    clock.advance(MIN_INTERVAL)
    assert await catalogs.image.get_or_fetch("ACME/Painter") is not None
    assert catalogs.image.is_ready() and not catalogs.text.is_ready()


async def test_refresh_stale_fetches_only_stale_catalogs(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    await catalogs.warm()
    clock.advance(TTL / 2)
    await catalogs.video.refresh()
    clock.advance(TTL / 2)

    results = await catalogs.refresh_stale()

    assert results == {"text": True, "embedding": True, "image": True, "video": False}
    assert server.request_count("video") == 2 and server.request_count("text") == 2


async def test_status_lists_every_catalog(make_catalogs: MakeCatalogs) -> None:
    catalogs = make_catalogs()
    await catalogs.warm()

    status = catalogs.status()

    assert list(status) == ["text", "embedding", "image", "video"]
    assert all(entry["ready"] and entry["size"] >= 1 for entry in status.values())
    assert [catalog.name for catalog in catalogs] == list(status)
    assert catalogs["video"] is catalogs.video


async def test_all_catalogs_share_the_injected_client(server: FakeOpenRouter) -> None:
    async with httpx.AsyncClient() as client:
        catalogs = CatalogSet(base_url=server.base_url, client=client)
        assert (await catalogs.warm()) == dict.fromkeys(("text", *OTHERS), True)
        await catalogs.aclose()  # not ours to close
        assert not client.is_closed and catalogs.client is client


async def test_text_readers_answer_from_the_served_catalog(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    server.publish("text", sample_catalogs()["text"])
    catalogs = make_catalogs()
    await catalogs.warm()
    text = catalogs.text
    requests = server.request_count("text")

    assert text.get_pricing("openai/gpt-4o-mini") == Pricing(0.15, 0.6)
    assert text.get_token_limits("anthropic/claude-3.5-haiku") == TokenLimits(
        200_000, 8_192
    )
    assert text.get_tokenizer("google/gemini-2.0-flash-001") == "Gemini"
    assert "tool_choice" in (text.get_supported_parameters("openai/gpt-4o-mini") or ())
    assert text.supports_tools("mistralai/mistral-7b-instruct:free") is True
    assert text.supports_tool_choice("mistralai/mistral-7b-instruct:free") is False
    assert text.supports_vision("openai/gpt-4o-mini") is True
    assert text.supports_video_input("google/gemini-2.0-flash-001") is True
    assert text.supports_structured_output("anthropic/claude-3.5-haiku") is False
    assert text.supports_tools("unknown/model") is None
    assert text.get_pricing("unknown/model") is None
    assert server.request_count("text") == requests  # readers never fetch


async def test_video_catalog_serves_capabilities(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    server.publish("video", sample_catalogs()["video"])
    catalogs = make_catalogs()

    entry = await catalogs.video.get_or_fetch("google/veo-3.1")

    assert entry is not None and entry.durations == (4, 6, 8)
    assert (
        entry.supports_first_frame
        and entry.supports_last_frame
        and entry.supports_audio
    )
