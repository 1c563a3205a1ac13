"""What a reply into a new channel costs discord.py's rate-limit buckets, stock and throttled.

Run: .venv/bin/python benchmarks/bucket_sweep.py [--replies 2000] [--rounds 3]

discord.py's HTTP client keeps one rate-limit bucket per channel replied in
(idle ones are dropped after 300 s) and, once it holds 256, walks them all
for idle ones each time it makes a new one. The worker throttles that walk
to once a minute (`tomori/bot/http_buckets.py`). This times `get_ratelimit`
for replies into channels it has no bucket for yet, with 500, 2,000 and
4,000 buckets already held (every one active, as within five minutes of
traffic: the production scenario at 150 msg/s holds about 1,900, a full
shard about 3,700), on a real `discord.http.HTTPClient`: stock (discord.py
as shipped) against throttled, interleaved round by round. Each reply adds
its bucket, so a round ends holding `--replies` more than it started with.
Printed: CPU per reply, medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HELD = (500, 2_000, 4_000)
WAYS = ("stock", "throttled")


async def _round(way: str, held: int, replies: int) -> float:
    from discord.http import HTTPClient

    from tomori.bot.http_buckets import throttle_bucket_sweeps

    http = HTTPClient(asyncio.get_running_loop())
    if way == "throttled":
        throttle_bucket_sweeps(http)
    for n in range(held):
        http.get_ratelimit(f"channels/{n}")
    started = time.process_time()
    for n in range(replies):
        http.get_ratelimit(f"new-channels/{n}")
    spent = time.process_time() - started
    await http.close()
    return spent * 1e6 / replies


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    from benchmarks.processes import load_average

    print(f"command: {' '.join(sys.argv)}\nload average: {load_average()}")
    results: dict[tuple[str, int], list[float]] = {}
    for number in range(options.rounds):
        for held in HELD:
            for way in WAYS if number % 2 == 0 else WAYS[::-1]:
                cost = asyncio.run(_round(way, held, options.replies))
                results.setdefault((way, held), []).append(cost)
    print(
        f"replies into new channels a round: {options.replies}, {options.rounds} rounds"
    )
    print(f"{'buckets held':>13}{'stock':>14}{'throttled':>14}")
    for held in HELD:
        stock = statistics.median(results["stock", held])
        throttled = statistics.median(results["throttled", held])
        print(f"{held:>13,}{stock:>11.1f} us{throttled:>11.1f} us")


if __name__ == "__main__":
    main()
