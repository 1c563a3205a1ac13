"""The worker's last turns and their latencies: for the admin's recent-turns view and the traffic summary."""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from typing import Any

from caches.turn_notes import TurnNotes
from tomori.bot.pipeline.turn import ResolvedTurn

#: Turns kept for the admin (the newest first there).
KEEP_TURNS = 50
#: Latencies kept for one summary window (percentiles of the newest ones).
KEEP_LATENCIES = 10_000


class RecentTurns:
    """A bounded record of the newest turns, cheap enough for every turn."""

    def __init__(self, *, keep: int = KEEP_TURNS) -> None:
        self._turns: deque[tuple[float, ResolvedTurn, float, tuple[str, ...]]] = deque(
            maxlen=keep
        )
        self._latencies: deque[float] = deque(maxlen=KEEP_LATENCIES)
        self._window_outcomes: Counter[str] = Counter()

    def record(self, turn: ResolvedTurn, notes: TurnNotes, seconds: float) -> None:
        """Keep one finished turn (formatting waits until someone asks)."""
        self._turns.append((time.time(), turn, seconds, tuple(notes.missed)))
        self._latencies.append(seconds)
        self._window_outcomes[turn.outcome] += 1

    def as_list(self, limit: int = 20) -> list[dict[str, Any]]:
        """Return the newest `limit` turns as plain data, newest first."""
        newest = list(self._turns)[-limit:]
        return [
            _turn_row(at, turn, s, missed) for at, turn, s, missed in reversed(newest)
        ]

    def take_window(self) -> dict[str, Any]:
        """Return the turns, outcomes and latency percentiles since the last call."""
        latencies = sorted(self._latencies)
        outcomes = dict(self._window_outcomes)
        self._latencies.clear()
        self._window_outcomes.clear()
        return {
            "turns": sum(outcomes.values()),
            "outcomes": outcomes,
            "p50_ms": _percentile(latencies, 0.50),
            "p99_ms": _percentile(latencies, 0.99),
        }


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)] * 1000


def _turn_row(
    at: float, turn: ResolvedTurn, seconds: float, missed: tuple[str, ...]
) -> dict[str, Any]:
    return {
        "at": at,
        "server_disc_id": turn.server_disc_id,
        "channel_disc_id": turn.channel_disc_id,
        "persona": turn.active_persona or turn.main_persona,
        "outcome": str(turn.outcome),
        "latency_ms": round(seconds * 1000, 3),
        "missed": sorted(set(missed)),
        "stale": list(turn.stale_layers),
    }
