"""Seeded sampling helpers: Zipf weights, Zipf pickers and apportioning totals."""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence


def zipf_weights(n: int, s: float) -> list[float]:
    """Return Zipf weights 1/rank**s for ranks 1..n."""
    return [1.0 / (rank**s) for rank in range(1, n + 1)]


def apportion(
    total: int,
    weights: Sequence[float],
    *,
    minimum: int = 0,
    cap: int | None = None,
) -> list[int]:
    """Split total into integer shares following weights, within [minimum, cap]."""
    count = len(weights)
    if count == 0:
        return []
    shares = [minimum] * count
    remaining = max(total - minimum * count, 0)
    open_slots = [i for i in range(count) if cap is None or shares[i] < cap]
    # Capped slots hand their surplus back to the others, round after round.
    while remaining > 0 and open_slots:
        given = _largest_remainder(remaining, [weights[i] for i in open_slots])
        for slot, extra in zip(open_slots, given, strict=True):
            room = extra if cap is None else min(extra, cap - shares[slot])
            shares[slot] += room
            remaining -= room
        open_slots = [i for i in open_slots if cap is None or shares[i] < cap]
        if cap is None:
            break
    return shares


def _largest_remainder(total: int, weights: Sequence[float]) -> list[int]:
    weight_sum = sum(weights) or 1.0
    exact = [total * w / weight_sum for w in weights]
    shares = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: exact[i] - shares[i], reverse=True)
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    return shares


class ZipfPicker:
    """Pick indexes 0..n-1 with Zipf probabilities (index 0 most often)."""

    def __init__(self, n: int, s: float):
        if n <= 0:
            raise ValueError("ZipfPicker needs at least one item")
        self._cumulative = list(itertools.accumulate(zipf_weights(n, s)))

    def pick(self, rng: random.Random) -> int:
        """Return one index drawn with rng."""
        point = rng.random() * self._cumulative[-1]
        return bisect.bisect_right(self._cumulative, point)
