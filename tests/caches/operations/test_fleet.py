"""The fleet's views: what is wrong with a worker, who sorts first, caches summed over workers."""

from __future__ import annotations

from typing import Any

import pytest

from caches.messages import CacheStats, MemoryFigures, WorkerSnapshot
from caches.operations import (
    fleet_cache,
    fleet_caches,
    missing_shards,
    worker_rows,
    worker_view,
)
from caches.operations.fleet import worker_problems

NOW = 1_000_000.0


def _view(worker_id: str = "w1", **fields: Any):  # type: ignore[no-untyped-def]
    defaults: dict[str, Any] = {
        "published_at": NOW - 1,
        "started_at": NOW - 3600,
        "memory": MemoryFigures(rss_mb=100, limit_mb=512, state="safe"),
        "bus": {"mode": "redis", "connected": True},
    }
    return worker_view(WorkerSnapshot(worker_id=worker_id, **{**defaults, **fields}))


def _texts(view: Any) -> list[tuple[str, str]]:
    return [(p.level, p.text) for p in worker_problems(view, stale_after=10, now=NOW)]


def test_a_healthy_worker_has_no_problem() -> None:
    assert _texts(_view()) == []
    assert _texts(_view(memory=None, bus={"mode": "local"})) == []  # embedded


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"memory": MemoryFigures(state="critical")}, [("danger", "memory critical")]),
        ({"memory": MemoryFigures(state="warning")}, [("warning", "memory warning")]),
        ({"bus": {"mode": "redis", "connected": False}}, [("danger", "bus down")]),
        (
            {"ready": False, "not_ready": ("gateway_connected", "caches_warmed")},
            [("danger", "not ready (gateway not connected, caches not warmed)")],
        ),
        ({"published_at": NOW - 12}, [("danger", "snapshot 12 s old")]),
        (
            {"consistency": {"user": {"checked": 9, "inconsistent": 2}}},
            [("warning", "2 inconsistencies found")],
        ),
    ],
)
def test_each_problem_is_named_with_its_level(
    fields: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert _texts(_view(**fields)) == expected


def test_workers_with_a_problem_sort_first_the_worst_first() -> None:
    views = [
        _view("a-ok"),
        _view("b-warn", memory=MemoryFigures(state="warning")),
        _view("c-ok"),
        _view("d-down", bus={"mode": "redis", "connected": False}),
    ]
    rows = worker_rows(views, snapshot_interval=5.0, now=NOW)
    assert [row.worker.worker_id for row in rows] == [
        "d-down",
        "b-warn",
        "a-ok",
        "c-ok",
    ]
    assert [row.level for row in rows] == ["danger", "warning", "ok", "ok"]


def test_a_snapshot_is_stale_after_two_publish_intervals() -> None:
    fresh, late = (
        _view("fresh", published_at=NOW - 9),
        _view("late", published_at=NOW - 11),
    )
    rows = worker_rows([fresh, late], snapshot_interval=5.0, now=NOW)
    assert [(r.worker.worker_id, r.level) for r in rows] == [
        ("late", "danger"),
        ("fresh", "ok"),
    ]


def test_a_workers_hit_rate_and_nines_cover_all_its_caches() -> None:
    view = _view(
        caches={
            "a": CacheStats(size=1, hits=90, misses=10),
            "b": CacheStats(size=1, hits=0, misses=100),
        },
        consistency={
            "a": {"checked": 500, "inconsistent": 0},
            "b": {"checked": 500, "inconsistent": 1},
        },
    )
    [row] = worker_rows([view], snapshot_interval=5.0, now=NOW)
    assert row.hit_rate == 45.0
    assert row.nines == pytest.approx(3.0)  # 1 in 1,000
    [empty] = worker_rows([_view()], snapshot_interval=5.0, now=NOW)
    assert empty.hit_rate is None and empty.nines is None


def test_a_caches_figures_are_summed_and_its_hit_rate_weighted_by_lookups() -> None:
    views = [
        _view(
            "w1",
            caches={
                "user": CacheStats(
                    size=8,
                    cap=10,
                    hits=9,
                    misses=1,
                    evictions=2,
                    invalidations=3,
                    last_invalidation=50.0,
                )
            },
        ),
        _view(
            "w2",
            caches={
                "user": CacheStats(
                    size=1,
                    cap=20,
                    hits=0,
                    misses=90,
                    stale_entries=4,
                    invalidations=1,
                    last_invalidation=70.0,
                )
            },
        ),
        _view("w3", caches={"llm": CacheStats(size=5)}),
    ]
    entries = fleet_caches(views)
    assert [entry.name for entry in entries] == ["user", "llm"]
    user = entries[0]
    total = user.total
    assert (total.size, total.evictions, total.invalidations, total.stale_entries) == (
        9,
        2,
        4,
        4,
    )
    assert total.hit_rate == 9.0  # 9 hits in 100 lookups, not the mean of 90 % and 0 %
    assert total.last_invalidation == 70.0
    assert user.caps == [10, 20] and user.max_fill == 80.0 and user.level == "warning"
    assert [view.worker_id for view, _ in user.per_worker] == ["w1", "w2"]
    assert fleet_cache(views, "llm") is not None and fleet_cache(views, "nope") is None


def test_shards_no_live_worker_serves_are_named() -> None:
    views = [_view(f"w{i}", shard_ids=(i,), shard_count=4) for i in (0, 1, 3)]
    assert missing_shards(views) == [2]
    assert missing_shards([*views, _view("w2", shard_ids=(2,), shard_count=4)]) == []
    # Workers that disagree on the count (a resharding under way): nothing said.
    assert missing_shards([*views, _view("x", shard_ids=(2,), shard_count=8)]) == []
    assert missing_shards([_view("unsharded")]) == []
