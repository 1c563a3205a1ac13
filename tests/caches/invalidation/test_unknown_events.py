"""An event naming no known cache or operation is an error: logged and counted."""

from __future__ import annotations

import logging

import pytest

from caches import bus
from caches.registry import registry


def test_unknown_caches_and_operations_are_logged_and_counted(
    local_bus: bus.Bus, caplog: pytest.LogCaptureFixture
) -> None:
    registry.get("user").set(5, None)  # type: ignore[attr-defined]
    with caplog.at_level(logging.ERROR, logger="caches.bus.applier"):
        local_bus.broadcast(
            [
                ("no_such_cache", "key", (1,)),
                ("user", "no_such_op", (1,)),
                ("user", "key", (5,)),
            ]
        )
    assert local_bus.snapshot()["unknown_events"] == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("no_such_cache" in line for line in errors), errors
    assert any("no_such_op" in line for line in errors), errors
    assert 5 not in registry.get("user")  # the good event was still applied


def test_a_catalog_event_is_not_unknown_where_no_catalog_is_held(
    local_bus: bus.Bus,
) -> None:
    local_bus.broadcast([("openrouter_text", "reload_snapshot", ())])
    assert local_bus.snapshot()["unknown_events"] == 0
