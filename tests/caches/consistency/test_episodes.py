"""The watcher's episodes: a confirmed inconsistency is repaired, counted and logged once."""

from __future__ import annotations

import logging
from collections.abc import Hashable

import pytest

from caches import consistency
from caches.consistency import NINES_CAP, ConsistencyWatcher
from caches.core import MISSING, BoundedTTLCache, FakeClock
from caches.registry import CacheRegistry, EmergencyPolicy, RegisteredCache

BOUND = 2.0
NAME = "episode_test"


class Fixture:
    """A cache with a dict for a database, its registry entry, a watcher and a clock."""

    def __init__(self) -> None:
        self.clock = FakeClock(start=50.0)
        self.database: dict[Hashable, str] = {}
        self.cache: BoundedTTLCache[Hashable, str] = BoundedTTLCache(
            NAME, maxsize=100, ttl=600, clock=self.clock
        )
        registry = CacheRegistry()
        registry.register(
            NAME, self.cache, policy=EmergencyPolicy.CLEAR, reload=self._reload
        )
        self.entry: RegisteredCache = registry.entry(NAME)
        self.watcher = ConsistencyWatcher(
            registry, checks_per_second=10, bound_seconds=BOUND, clock=self.clock
        )

    async def _reload(self, key: Hashable) -> str | None:
        return self.database.get(key)

    async def confirm(self, key: Hashable) -> None:
        """Check `key`, then again past the bound (a difference is confirmed)."""
        await self.watcher.check_key(self.entry, key)
        self.clock.advance(BOUND + 0.1)
        await self.watcher.check_key(self.entry, key)

    def figures(self) -> dict[str, object]:
        summary = self.watcher.summary()[NAME]
        return {k: summary[k] for k in ("checked", "inconsistent", "repairs")}


@pytest.fixture
def f() -> Fixture:
    return Fixture()


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_confirmed_inconsistency_is_dropped_counted_and_logged_once(
    f: Fixture, caplog: pytest.LogCaptureFixture
) -> None:
    f.database["k"] = "new"
    f.cache.set("k", "old")
    await f.watcher.check_key(f.entry, "k")
    assert f.cache.peek("k") == "old"  # a suspect only: maybe in flight
    assert f.figures() == {"checked": 0, "inconsistent": 0, "repairs": 0}
    f.clock.advance(BOUND + 0.1)
    await f.watcher.check_key(f.entry, "k")
    assert f.cache.peek("k") is MISSING  # repaired: the next read reloads
    assert f.figures() == {"checked": 1, "inconsistent": 1, "repairs": 1}
    [line] = errors(caplog)
    assert f"{NAME}['k'] differs from the database" in line
    assert "dropped it from this worker's cache" in line


async def test_a_key_that_stays_inconsistent_is_one_episode(
    f: Fixture, caplog: pytest.LogCaptureFixture
) -> None:
    f.database["k"] = "new"
    f.cache.set("k", "old")
    await f.confirm("k")
    for _ in range(3):  # a stale fill races the drop, again and again
        f.cache.set("k", "old")
        await f.confirm("k")
        assert f.cache.peek("k") is MISSING  # dropped again every time
    assert f.figures() == {"checked": 1, "inconsistent": 1, "repairs": 1}
    assert len(errors(caplog)) == 1


async def test_an_agreeing_check_ends_the_episode(
    f: Fixture, caplog: pytest.LogCaptureFixture
) -> None:
    f.database["k"] = "v1"
    f.cache.set("k", "v0")
    await f.confirm("k")
    f.cache.set("k", "v1")  # the next read reloaded it
    await f.watcher.check_key(f.entry, "k")
    assert f.figures() == {"checked": 2, "inconsistent": 1, "repairs": 1}
    f.database["k"] = "v0"  # an outside writer puts the old value back
    await f.confirm("k")
    assert f.figures() == {"checked": 3, "inconsistent": 2, "repairs": 2}
    assert len(errors(caplog)) == 2


async def test_a_new_database_value_is_a_new_episode(f: Fixture) -> None:
    f.database["k"] = "v1"
    f.cache.set("k", "v0")
    await f.confirm("k")
    f.database["k"] = "v2"  # changed again, never read in between
    f.cache.set("k", "v0")
    await f.confirm("k")
    assert f.figures() == {"checked": 2, "inconsistent": 2, "repairs": 2}


async def test_a_change_within_the_bound_is_neither_counted_nor_dropped(
    f: Fixture,
) -> None:
    f.database["k"] = "new"
    f.cache.set("k", "old")
    await f.watcher.check_key(f.entry, "k")
    f.clock.advance(BOUND - 0.5)
    await f.watcher.check_key(f.entry, "k")
    assert f.cache.peek("k") == "old"
    f.cache.set("k", "new")  # the invalidation and reload landed
    f.clock.advance(1.0)
    await f.watcher.check_key(f.entry, "k")
    assert f.figures() == {"checked": 1, "inconsistent": 0, "repairs": 0}


async def test_open_episodes_are_bounded(
    f: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consistency, "MAX_OPEN_EPISODES", 3)
    for key in range(5):
        f.database[key] = "new"
        f.cache.set(key, "old")
        await f.confirm(key)
    assert list(f.watcher.caches[NAME].episodes) == [2, 3, 4]
    assert f.figures() == {"checked": 5, "inconsistent": 5, "repairs": 5}


async def test_a_long_key_is_logged_bounded(
    f: Fixture, caplog: pytest.LogCaptureFixture
) -> None:
    key = "x" * 100_000
    f.database[key] = "new"
    f.cache.set(key, "old")
    await f.confirm(key)
    [line] = errors(caplog)
    assert len(line) < 600 and "100,002 characters" in line


async def test_a_perfect_record_has_the_capped_nines(f: Fixture) -> None:
    f.database["k"] = "same"
    f.cache.set("k", "same")
    await f.watcher.check_key(f.entry, "k")
    assert f.watcher.summary()[NAME] == {
        "checked": 1,
        "inconsistent": 0,
        "repairs": 0,
        "ratio": 1.0,
        "nines": NINES_CAP,
    }
