"""Fixtures: the database behind a breakable proxy, Redis of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from caches import live


@pytest.fixture
def live_on(settings) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """Return a function pointing live snapshots at a Redis URL ("" for in-process)."""

    def point(url: str) -> None:
        settings.REDIS_URL = url
        live.reset_for_tests()

    point("")
    yield point
    live.reset_for_tests()
