"""Database failures: noted on the turn, named by layer; a cut connection recovers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection

from caches import db_outage
from caches.db_outage import database_failed, failing_layer, served_stale
from caches.layers import channel_whitelist
from caches.turn_notes import TurnNotes
from tests.support.faults import TcpProxy
from tomori.domain.repositories.health import drop_broken_connections


@pytest.fixture(autouse=True)
def _no_open_outage() -> Iterator[None]:
    db_outage.outage_log.success()  # earlier tests' failures end here
    yield
    db_outage.outage_log.success()


async def test_failures_and_stale_answers_are_noted_on_the_current_turn() -> None:
    database_failed("user", OperationalError("outside any turn"))  # noted nowhere
    with TurnNotes() as notes:
        database_failed("tomori_state", OperationalError("down"))
        served_stale("tomori_state")
        with TurnNotes() as inner:  # a turn inside a turn keeps its own notes
            database_failed("user", OperationalError("down"))
    assert (notes.failed, notes.stale) == (["tomori_state"], ["tomori_state"])
    assert inner.failed == ["user"]
    assert db_outage.outage_log.active and db_outage.outage_log.failures == 3


async def test_a_propagated_error_is_named_after_the_layer_that_raised_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def down(*_args: Any, **_kwargs: Any) -> Any:
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(channel_whitelist, "run_db", down)
    with pytest.raises(OperationalError) as caught:
        await channel_whitelist.get_cached_whitelist_status(1, 2)
    assert failing_layer(caught.value) == "channel_whitelist"
    assert failing_layer(OperationalError("no traceback")) == "pipeline"


def _in_own_thread(fn: Any) -> Any:
    """Run `fn` in a new thread (its own connection) and return what it returned."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            result["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.mark.django_db(transaction=True)
def test_a_connection_cut_by_an_outage_is_dropped_so_queries_recover(
    pg_proxy: TcpProxy,
) -> None:
    def scenario() -> list[str]:
        connection.settings_dict = {
            **connection.settings_dict,
            "HOST": "127.0.0.1",
            "PORT": str(pg_proxy.port),
        }
        seen = [_select_one()]
        pg_proxy.refuse()
        seen += [_select_one(), _select_one()]  # cut, then "the connection is closed"
        pg_proxy.forward()
        seen.append(_select_one())  # Django does not reconnect by itself
        seen.append(f"dropped {drop_broken_connections()}")
        seen.append(_select_one())
        return seen

    seen = _in_own_thread(scenario)
    assert seen[0] == "ok" and seen[1] != "ok" and "closed" in seen[2]
    assert "closed" in seen[3]
    assert seen[4:] == ["dropped 1", "ok"]


def _select_one() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except OperationalError as exc:
        return str(exc)
    return "ok"
