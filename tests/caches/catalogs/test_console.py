"""The catalogs say what they did: a line when one changes, and why one was not refreshed."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from caches.catalogs import CatalogSet
from caches.catalogs.fake_server import FakeOpenRouter
from caches.catalogs.outcomes import format_age, summarize
from caches.catalogs.service import build_catalog_set, refresh_and_store
from caches.core import FakeClock
from caches.messages import RefreshCatalogs
from caches.operations import describe_reply
from caches.operations.worker import WorkerContext, execute_command_async
from tests.caches.catalogs.conftest import text_model
from tests.support.faults import free_port

REFRESHER = "caches.catalogs.refresher"


def _serving_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "serving" in r.getMessage()]


async def test_a_catalog_line_is_logged_only_when_the_catalog_changes(
    make_catalogs: Callable[..., CatalogSet],
    server: FakeOpenRouter,
    clock: FakeClock,
    wall_clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=REFRESHER)
    text = make_catalogs().text
    assert await text.refresh()
    assert _serving_lines(caplog) == ["catalog text: serving 2 models"]

    clock.advance(120)
    assert await text.refresh()  # the same models again: nothing to say
    models = [text_model("openai/gpt-4o"), text_model("anthropic/claude-3.5-haiku")]
    assert text.load_snapshot(models, wall_clock() + 5)  # a worker's minute reload
    assert len(_serving_lines(caplog)) == 1

    server.add_model("text", text_model("new/model"))
    clock.advance(120)
    assert await text.refresh()
    assert _serving_lines(caplog)[1:] == ["catalog text: serving 3 models (was 2)"]


async def test_one_model_is_one_model(
    make_catalogs: Callable[..., CatalogSet], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=REFRESHER)
    assert await make_catalogs().embedding.refresh()
    assert _serving_lines(caplog) == ["catalog embedding: serving 1 model"]


async def test_a_rate_limited_refresh_says_how_long_ago_the_last_one_was(
    make_catalogs: Callable[..., CatalogSet], clock: FakeClock
) -> None:
    text = make_catalogs().text
    assert (await text.refresh_with_reason()).refreshed
    clock.advance(45)
    outcome = await text.refresh_with_reason()
    assert not outcome.refreshed
    assert outcome.reason == "rate-limited, last refresh 45 s ago"
    assert (await text.refresh_with_reason(force=True)).refreshed


async def test_a_failed_refresh_gives_the_servers_answer_then_the_rate_limit(
    make_catalogs: Callable[..., CatalogSet], server: FakeOpenRouter, clock: FakeClock
) -> None:
    text = make_catalogs().text
    server.respond("text", status=503)
    assert (await text.refresh_with_reason()).reason == "HTTP 503"
    clock.advance(3)
    assert (await text.refresh_with_reason()).reason == (
        "rate-limited, last attempt 3 s ago failed: HTTP 503"
    )


async def test_an_unreachable_openrouter_is_named_as_a_network_error(
    make_catalogs: Callable[..., CatalogSet],
) -> None:
    text = make_catalogs(base_url=f"http://127.0.0.1:{free_port()}/api/v1").text
    reason = (await text.refresh_with_reason()).reason
    assert reason is not None and reason.startswith("network error (ConnectError")


async def test_the_refresh_command_reply_says_why_per_catalog(
    make_catalogs: Callable[..., CatalogSet], server: FakeOpenRouter, clock: FakeClock
) -> None:
    context = WorkerContext(worker_id="w1", catalogs=make_catalogs())

    async def refresh(*, fresh: bool) -> str:
        command = RefreshCatalogs.issue(fresh=fresh, issued_by="manage.py")
        return describe_reply(await execute_command_async(command, context=context))

    assert await refresh(fresh=False) == (
        "worker w1: catalogs: text ok, embedding ok, image ok, video ok"
    )
    clock.advance(45)
    server.respond("video", status=500)
    assert await refresh(fresh=False) == (
        "worker w1: catalogs: text, embedding, image, video not refreshed: "
        "rate-limited, last refresh 45 s ago (use --fresh)"
    )
    assert await refresh(fresh=True) == (
        "worker w1: catalogs: text ok, embedding ok, image ok; "
        "video not refreshed: HTTP 500"
    )


@pytest.mark.django_db(transaction=True)
def test_the_beat_task_logs_why_it_refreshed_nothing(
    openrouter: FakeOpenRouter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="caches.catalogs.service")
    refresh_and_store(
        force=True, catalogs=build_catalog_set(base_url=openrouter.base_url)
    )
    openrouter.respond("image", status=503)
    refresh_and_store(
        force=True, catalogs=build_catalog_set(base_url=openrouter.base_url)
    )
    outcome = refresh_and_store(
        catalogs=build_catalog_set(base_url=openrouter.base_url)
    )
    assert set(outcome.values()) == {"fresh"}
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("service")]
    assert (
        lines[0]
        == "catalogs: text refreshed, embedding refreshed, image refreshed, video refreshed"
    )
    assert lines[1] == (
        "catalogs: text refreshed, embedding refreshed, video refreshed; "
        "image not refreshed: HTTP 503"
    )
    assert lines[2].startswith(
        "catalogs: text, embedding, image, video not refreshed: "
        "already fresh (stored at most "
    )
    assert lines[2].endswith(" s ago, TTL 6.0 h)")


def test_ages_and_summaries_read_as_a_person_would_say_them() -> None:
    assert [format_age(s) for s in (0.4, 45, 720, 21_600)] == [
        "0 s",
        "45 s",
        "12 min",
        "6.0 h",
    ]
    assert summarize({}) == "none"
    assert summarize(
        {"text": "rate-limited, x", "image": "HTTP 503"}, force_hint="!"
    ) == ("text not refreshed: rate-limited, x!; image not refreshed: HTTP 503")
