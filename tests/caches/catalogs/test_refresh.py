"""The shared refresh machine, driven through a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from caches.catalogs import CatalogSet
from caches.catalogs.fake_server import FakeOpenRouter
from caches.core import FakeClock
from tests.caches.catalogs.conftest import MIN_INTERVAL, TTL, text_model

MakeCatalogs = Callable[..., CatalogSet]
NEW_MODEL = "acme/brand-new-model"


async def test_model_published_after_start_is_found_by_get_or_fetch(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    await catalogs.warm()
    server.add_model("text", text_model(NEW_MODEL))
    clock.advance(MIN_INTERVAL)

    entry = await catalogs.text.get_or_fetch(NEW_MODEL)

    assert entry is not None and entry.id == NEW_MODEL
    assert server.request_count("text") == 2


async def test_a_503_at_start_leaves_catalog_not_ready_until_a_later_miss(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    server.respond("text", status=503)
    assert (await catalogs.warm())["text"] is False
    assert not catalogs.text.is_ready()
    server.add_model("text", text_model(NEW_MODEL))

    assert await catalogs.text.get_or_fetch(NEW_MODEL) is None  # rate-limited
    clock.advance(MIN_INTERVAL)
    assert await catalogs.text.get_or_fetch(NEW_MODEL) is not None

    assert catalogs.text.is_ready()
    assert server.request_count("text") == 2


FAILURES: dict[str, Callable[[FakeOpenRouter], Any]] = {
    "http_503": lambda s: s.respond("text", status=503),
    "http_404": lambda s: s.respond("text", status=404),
    "timeout": lambda s: s.hold("text"),
    "malformed_json": lambda s: s.respond("text", body='{"data": [ {"id": '),
    "not_an_object": lambda s: s.respond("text", json_body=["openai/gpt-4o"]),
    "no_data_array": lambda s: s.respond("text", json_body={"models": []}),
    "data_not_a_list": lambda s: s.respond("text", json_body={"data": {"id": "x"}}),
    "zero_models": lambda s: s.publish("text", []),
    "zero_usable_models": lambda s: s.respond(
        "text", json_body={"data": [{"name": "no id"}, "junk", {"id": " "}]}
    ),
}
EXPECTED_ERROR = {
    "http_503": "HTTP 503",
    "http_404": "HTTP 404",
    "timeout": "timeout",
    "malformed_json": "malformed JSON",
    "not_an_object": "without a data array",
    "no_data_array": "without a data array",
    "data_not_a_list": "without a data array",
    "zero_models": "no usable models",
    "zero_usable_models": "no usable models",
}


@pytest.mark.parametrize("failure", FAILURES)
async def test_failed_refresh_keeps_previous_catalog(
    failure: str, server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs(timeout=0.2)
    assert await catalogs.text.refresh()
    FAILURES[failure](server)

    assert await catalogs.text.refresh(force=True) is False

    assert catalogs.text.get("openai/gpt-4o") is not None
    status = catalogs.text.status()
    assert status["ready"] and status["size"] == 2
    assert EXPECTED_ERROR[failure] in status["last_error"]
    assert (status["fetches"], status["failures"]) == (2, 1)


@pytest.mark.parametrize("failure", FAILURES)
async def test_failed_first_refresh_leaves_catalog_not_ready(
    failure: str, server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs(timeout=0.2)
    FAILURES[failure](server)

    assert await catalogs.text.refresh() is False

    assert not catalogs.text.is_ready()
    assert len(catalogs.text) == 0
    assert EXPECTED_ERROR[failure] in catalogs.text.status()["last_error"]


async def test_connection_refused_is_a_failure(make_catalogs: MakeCatalogs) -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    catalogs = make_catalogs(base_url=f"http://127.0.0.1:{port}/api/v1")

    assert await catalogs.text.refresh() is False

    assert "network error" in catalogs.text.status()["last_error"]


async def test_start_plus_three_misses_is_one_request_under_the_rate_limit(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    await catalogs.warm()
    for _ in range(3):
        clock.advance(MIN_INTERVAL / 4)
        assert await catalogs.text.get_or_fetch("unknown/model") is None

    assert server.request_count("text") == 1


async def test_fresh_bypasses_the_rate_limit(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs()
    await catalogs.warm()
    server.add_model("text", text_model(NEW_MODEL))

    assert await catalogs.text.get_or_fetch(NEW_MODEL) is None
    assert await catalogs.text.get_or_fetch(NEW_MODEL, fresh=True) is not None

    assert server.request_count("text") == 2


async def test_fifty_concurrent_misses_share_one_request(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs(min_interval=0)  # only single flight can collapse them
    server.hold("text")
    lookups = [
        asyncio.create_task(catalogs.text.get_or_fetch("openai/gpt-4o"))
        for _ in range(50)
    ]
    await server.wait_for_requests("text")
    server.release("text")

    entries = await asyncio.gather(*lookups)

    assert all(entry is not None for entry in entries)
    assert server.request_count("text") == 1


async def test_forced_refresh_joins_the_refresh_in_flight(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs(min_interval=0)
    server.hold("text")
    background = asyncio.create_task(catalogs.text.refresh())
    await server.wait_for_requests("text")
    forced = asyncio.create_task(
        catalogs.text.get_or_fetch("openai/gpt-4o", fresh=True)
    )
    server.release("text")

    assert await background is True
    assert await forced is not None
    assert server.request_count("text") == 1


async def test_a_cancelled_caller_does_not_cancel_the_shared_refresh(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs()
    server.hold("text")
    impatient = asyncio.create_task(catalogs.text.get_or_fetch("openai/gpt-4o"))
    patient = asyncio.create_task(catalogs.text.get_or_fetch("openai/gpt-4o"))
    await server.wait_for_requests("text")
    impatient.cancel()
    server.release("text")

    assert await patient is not None
    assert impatient.cancelled()


async def test_stale_check_fetches_only_after_the_ttl(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    await catalogs.text.refresh()
    clock.advance(TTL - 1)

    assert not catalogs.text.is_stale()
    assert await catalogs.text.refresh_if_stale() is False
    clock.advance(1)
    assert catalogs.text.is_stale()
    assert await catalogs.text.refresh_if_stale() is True

    assert server.request_count("text") == 2
    assert not catalogs.text.is_stale()


async def test_codenames_are_trimmed_and_lowercased_on_write_and_lookup(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    server.publish("text", [text_model("  OpenAI/GPT-4o-Mini ")])
    catalogs = make_catalogs()
    await catalogs.text.refresh()

    assert list(catalogs.text.entries()) == ["openai/gpt-4o-mini"]
    for spelling in (
        "openai/gpt-4o-mini",
        " OPENAI/gpt-4o-MINI\n",
        "\tOpenAI/GPT-4o-Mini",
    ):
        assert catalogs.text.get(spelling) is not None
        assert await catalogs.text.get_or_fetch(spelling) is not None
    assert server.request_count("text") == 1


async def test_load_snapshot_makes_catalog_ready_without_network(
    server: FakeOpenRouter,
    make_catalogs: MakeCatalogs,
    clock: FakeClock,
    wall_clock: FakeClock,
) -> None:
    catalogs = make_catalogs()
    fetched_at = wall_clock() - 100

    assert catalogs.text.load_snapshot([text_model("Stored/Model")], fetched_at)

    assert catalogs.text.is_ready() and catalogs.text.get("stored/model") is not None
    assert catalogs.text.status()["last_success"] == fetched_at
    assert server.request_count("text") == 0
    assert not catalogs.text.is_stale()
    clock.advance(TTL - 100)
    assert catalogs.text.is_stale()  # the snapshot's age counts toward the TTL


async def test_load_snapshot_refuses_an_older_or_unusable_snapshot(
    make_catalogs: MakeCatalogs, wall_clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    now = wall_clock()
    assert catalogs.text.load_snapshot([text_model("a/new")], now)

    assert not catalogs.text.load_snapshot([text_model("a/old")], now - 1)
    assert not catalogs.text.load_snapshot([], now + 1)
    assert not catalogs.text.load_snapshot([{"no": "id"}], now + 1)

    assert list(catalogs.text.entries()) == ["a/new"]


async def test_on_refreshed_gets_each_successful_fetch_and_nothing_else(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, wall_clock: FakeClock
) -> None:
    calls: list[tuple[str, list[Any]]] = []

    async def record(name: str, models: list[Any]) -> None:
        calls.append((name, models))

    catalogs = make_catalogs(on_refreshed=record)
    catalogs.text.load_snapshot([text_model("stored/model")], wall_clock() - 1)
    await catalogs.text.refresh()
    server.respond("text", status=500)
    await catalogs.text.refresh(force=True)

    assert [(name, [m["id"] for m in models]) for name, models in calls] == [
        ("text", ["openai/gpt-4o", "anthropic/claude-3.5-haiku"])
    ]


async def test_a_failing_on_refreshed_callback_does_not_fail_the_refresh(
    make_catalogs: MakeCatalogs,
) -> None:
    def explode(name: str, models: list[Any]) -> None:
        raise RuntimeError("storage down")

    catalogs = make_catalogs(on_refreshed=explode)

    assert await catalogs.text.refresh() is True
    assert catalogs.text.is_ready()


async def test_status_reports_attempts_successes_and_errors(
    server: FakeOpenRouter,
    make_catalogs: MakeCatalogs,
    clock: FakeClock,
    wall_clock: FakeClock,
) -> None:
    catalogs = make_catalogs()
    assert catalogs.text.status() == {
        "name": "text",
        "size": 0,
        "ready": False,
        "last_success": None,
        "last_attempt": None,
        "last_error": None,
        "stale": True,
        "refreshing": False,
        "fetches": 0,
        "failures": 0,
    }
    await catalogs.text.refresh()
    success_at = wall_clock()
    wall_clock.advance(90)
    clock.advance(90)
    server.respond("text", status=502)
    await catalogs.text.refresh()

    status = catalogs.text.status()
    assert (status["last_success"], status["last_attempt"]) == (
        success_at,
        success_at + 90,
    )
    assert (status["size"], status["ready"], status["stale"]) == (2, True, False)
    assert (status["fetches"], status["failures"], status["last_error"]) == (
        2,
        1,
        "HTTP 502",
    )


async def test_api_key_is_sent_as_bearer_only_when_configured(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    await make_catalogs(api_key="sk-test").text.refresh()
    await make_catalogs(api_key="").text.refresh()

    assert [r.authorization for r in server.requests] == ["Bearer sk-test", None]


async def test_registry_protocol(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs
) -> None:
    catalogs = make_catalogs()
    await catalogs.text.refresh()
    catalogs.text.get("openai/gpt-4o")
    catalogs.text.get("nobody/nothing")

    assert len(catalogs.text) == 2 and catalogs.text.clear_expired() == 0
    assert catalogs.text.invalidate(" OpenAI/GPT-4o ") == 1
    assert catalogs.text.invalidate("openai/gpt-4o") == 0
    stats = catalogs.text.stats()
    assert (stats["size"], stats["hits"], stats["misses"], stats["loads"]) == (
        1,
        1,
        1,
        1,
    )
    assert stats["invalidations"] == 1
    assert catalogs.text.clear() == 1
    assert not catalogs.text.is_ready()
    # clear() also drops the rate limit, so the next miss reloads at once.
    assert await catalogs.text.get_or_fetch("openai/gpt-4o") is not None
    assert server.request_count("text") == 2


async def test_set_clock_keeps_the_ages_of_ttl_and_rate_limit(
    server: FakeOpenRouter, make_catalogs: MakeCatalogs, clock: FakeClock
) -> None:
    catalogs = make_catalogs()
    await catalogs.text.refresh()
    clock.advance(TTL - 10)
    other = FakeClock(start=5.0)
    catalogs.set_clock(other)

    assert not catalogs.text.is_stale()
    other.advance(10)
    assert catalogs.text.is_stale()
