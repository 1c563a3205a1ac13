"""Short-term memory's cap against the reads of conversations that come back.

    .venv/bin/python benchmarks/stm_cap_replay.py [--scenario production] \\
        [--rate 150] [--minutes 11] [--window 2] [--caps 20000,40000]

Offline, in a second or two: replays the simulated Discord's own seeded
message stream (the one `message_cost.py` and `runbot_rss.py` send) through
a model of short-term memory's keys and counts, per message of the last
`--window` minutes, the turns' reads of a key that was stored before but is
no longer held: what the worker reads back from the table (the stored-keys
filter rightly says "maybe stored" for them).

The model: each human message in a guild is one turn reading and then
storing two keys, the user's (user, channel) and the server's (guild,
channel) (one persona a server; bots and webhooks store nothing; every
guild counts as configured and whitelisted, so it reads a little high).
The cache is the worker's: one map in store order, a re-store moves a key
to the back, the front is evicted at the cap. Beside it, for comparison
only, S3-FIFO (a small probation queue, a main queue, ghosts): a
frequency-aware policy the worker does not have.

Checked against the real worker (message_cost.py --warmup 540 --window
120, production, 150 msg/s): it read 0.287 rows a message in all at 20,000
(about 0.26 of them short-term memory's, the other layers' loads apart)
and 0.137 at 40,000; this model says 0.26 and 0.10.
"""

from __future__ import annotations

import argparse
import sys
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tomori.bot.simulator.generator import generate_world  # noqa: E402
from tomori.bot.simulator.scenario import Scenario  # noqa: E402
from tomori.bot.simulator.traffic import TrafficModel  # noqa: E402

Key = tuple[str, int, int]
#: Store order in, the key read back or not out: one policy's step per key.
Policy = Callable[[Key], bool]


def turns(scenario: Scenario, messages: int) -> list[tuple[int, int, int, int]]:
    """Return (message index, guild, channel, user) of the stream's human messages."""
    model = TrafficModel(generate_world(scenario), scenario)
    found = []
    for index in range(messages):
        planned = model.next()
        author = planned.author
        if author is None or author.user.bot:
            continue
        found.append((index, planned.guild.id, planned.channel_id, author.user.id))
    return found


def store_order(cap: int) -> Policy:
    """Return the worker's policy: evict the least recently stored key at the cap."""
    held: OrderedDict[Key, None] = OrderedDict()

    def step(key: Key) -> bool:
        missed = key not in held
        held.pop(key, None)
        held[key] = None
        if len(held) > cap:
            held.popitem(last=False)
        return missed

    return step


def s3_fifo(cap: int, small_share: float = 0.1) -> Policy:
    """Return S3-FIFO at `cap` (Yang et al., SOSP 2023), for comparison."""
    small: OrderedDict[Key, None] = OrderedDict()
    main: OrderedDict[Key, None] = OrderedDict()
    ghost: OrderedDict[Key, None] = OrderedDict()
    seen: dict[Key, int] = {}
    small_cap = int(cap * small_share)
    main_cap = cap - small_cap

    def evict_main() -> None:
        while True:
            key, _ = main.popitem(last=False)
            if seen.get(key, 0) > 0:
                seen[key] -= 1
                main[key] = None
            else:
                seen.pop(key, None)
                return

    def evict_small() -> None:
        key, _ = small.popitem(last=False)
        if seen.get(key, 0) > 0:
            seen[key] = 0
            main[key] = None
            if len(main) > main_cap:
                evict_main()
            return
        seen.pop(key, None)
        ghost[key] = None
        if len(ghost) > main_cap:
            ghost.popitem(last=False)

    def step(key: Key) -> bool:
        if key in small or key in main:
            seen[key] = min(seen.get(key, 0) + 1, 3)
            return False
        if key in ghost:
            del ghost[key]
            main[key] = None
            if len(main) > main_cap:
                evict_main()
        else:
            small[key] = None
            if len(small) > small_cap:
                evict_small()
        return True

    return step


def read_backs(
    stream: list[tuple[int, int, int, int]], policy: Policy, window_from: int
) -> int:
    """Return the reads of stored-then-dropped keys from message `window_from` on."""
    stored: set[Key] = set()
    reads = 0
    for index, guild, channel, user in stream:
        for key in (("user", user, channel), ("server", guild, channel)):
            if policy(key) and key in stored and index >= window_from:
                reads += 1
            stored.add(key)
    return reads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="production")
    parser.add_argument("--rate", type=float, default=150.0, help="messages/s")
    parser.add_argument("--minutes", type=float, default=11.0, help="stream length")
    parser.add_argument("--window", type=float, default=2.0, help="minutes counted")
    parser.add_argument("--caps", default="20000,40000")
    options = parser.parse_args(argv)
    messages = int(options.rate * options.minutes * 60)
    window = int(options.rate * options.window * 60)
    stream = turns(Scenario.named(options.scenario), messages)
    print(
        f"command: {' '.join(sys.argv)}\nload: scenario {options.scenario}, "
        f"{messages:,} messages ({options.minutes:g} min at {options.rate:g} msg/s), "
        f"{len(stream):,} turns; reads counted over the last {options.window:g} min"
    )
    print(f"{'cap':>8}  {'store order (the worker)':>26}  {'S3-FIFO (comparison)':>22}")
    for cap in (int(text) for text in options.caps.split(",")):
        per = [
            read_backs(stream, make(cap), messages - window) / window
            for make in (store_order, s3_fifo)
        ]
        print(f"{cap:>8,}  {per[0]:>20.3f} /msg  {per[1]:>16.3f} /msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
