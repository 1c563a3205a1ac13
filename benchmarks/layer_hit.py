"""Time layer hits (tomori_state, user row, whitelist, spotlight, channel overrides) in a checkout, or this one.

Run: DATABASE_URL=... .venv/bin/python benchmarks/layer_hit.py [path/to/checkout]
     DATABASE_URL=... .venv/bin/python benchmarks/layer_hit.py --base OLD [--rounds 200]

A hit is a coroutine that awaits nothing, driven here without an event loop.
Alone, prints ns per hit (the best of ROUNDS rounds), then each net of an
empty coroutine driven the same way (what every async hit pays before its
own work). With `--base`, two long-lived worker processes (this tree and the
checkout OLD, each its root first on sys.path) time one short round of each
figure in turn (`--calls` hits on the thread's CPU time, so a shared
machine's waits count not), alternating which goes first;
prints the best of each side and the ratio this/base (below 1: this tree is
faster), with the command and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
CALLS = 200_000
ROUNDS = 7

Round = Callable[[], float]
#: Calls per round and the clock timing them (`--base` workers: shorter rounds
#: on the thread's CPU time, so time the process waits for a core counts not).
TIMING: dict[str, Any] = {"calls": CALLS, "clock": time.perf_counter}


def drive(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a coroutine that must not suspend (a hit) and return its value."""
    coro = fn(*args, **kwargs)
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"{fn.__name__} awaited: not a hit")


def one_round(call: Callable[[int], Any], keys: list[int]) -> Round:
    """Return a round: `calls` calls of `call`, timed by `clock`, in ns per call."""

    def run() -> float:
        calls, clock = TIMING["calls"], TIMING["clock"]
        start = clock()
        for i in range(calls):
            call(keys[i % len(keys)])
        return (clock() - start) / calls * 1e9

    return run


def setup(root: Path) -> dict[str, Round]:
    """Build `root`'s registry, fill the maps the hits read; return a round per figure."""
    sys.path.insert(0, str(root))
    os.chdir(root)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
    import django

    django.setup()
    from datetime import timedelta

    from django.utils import timezone

    from caches.layers import (
        channel_whitelist,
        load_all,
        personal_spotlight,
        tomori_state,
        user,
    )
    from caches.registry import registry

    try:
        from tomori.domain.repositories.spotlight import SpotlightRecord
    except ImportError:  # a checkout from before tomori.domain (issue 30)
        from tomori.repositories.spotlight import SpotlightRecord

    load_all()
    # The maps are reached through the registry (by their labels), not through
    # the modules' own names for them: the same lines fill any checkout's.
    fresh = registry.get("tomori_state").maps()["primary"]
    users = registry.get("user").maps()["primary"]
    decisions = registry.get("channel_whitelist").maps()["primary"]
    results = registry.get("personal_spotlight").maps()["primary"]
    gates = registry.get("personal_spotlight").maps()["gate"]
    keys = list(range(10**17, 10**17 + 1000))
    for key in keys:
        fresh.set(key, object())
        users.set(key, None)
        # Channel 5: an answer kept per role set (a server with a role
        # whitelist); channel 6: one answer for every role set ("*"), which a
        # build without that slot ignores (it finds the role-keyed entry).
        decisions.set((key, 5, 0, None), True)
        decisions.set((key, 6, 0, None), True)
        decisions.set((key, 6, 0, "*"), True)
    later = timezone.now() + timedelta(hours=1)
    spot_keys = keys[:500]  # three entries each: within the 2,000 default cap
    for key in spot_keys:
        gates.set(key, True)
        results.set((key, 1, 5), None)  # no spotlight
        results.set((key, 2, 5), SpotlightRecord(9, None))
        results.set((key, 3, 5), SpotlightRecord(9, later))
    spotlight = personal_spotlight.get_cached_personal_spotlight_status
    whitelist = channel_whitelist.get_cached_whitelist_status
    llm_override, prompt = fill_overrides(keys)

    async def awaits_nothing(key: int, *_: int) -> int:
        return key

    return {
        # What every row below includes: a coroutine built, sent, finished.
        "empty_coroutine": one_round(lambda k: drive(awaits_nothing, k, 5), keys),
        "tomori_state": one_round(
            lambda k: drive(tomori_state.get_cached_tomori_state, k), keys
        ),
        "user_row": one_round(lambda k: drive(user.get_cached_user_row, k), keys),
        "whitelist_per_role_set": one_round(lambda k: drive(whitelist, k, 5), keys),
        "whitelist_any_roles": one_round(lambda k: drive(whitelist, k, 6), keys),
        "spotlight_none": one_round(lambda k: drive(spotlight, k, 1, 5), spot_keys),
        "spotlight_open_ended": one_round(
            lambda k: drive(spotlight, k, 2, 5), spot_keys
        ),
        "spotlight_expiring": one_round(lambda k: drive(spotlight, k, 3, 5), spot_keys),
        "channel_llm_none": one_round(lambda k: drive(llm_override, k, 5), keys),
        "channel_llm_thread": one_round(
            lambda k: drive(llm_override, k, 8, parent_disc_id=5), keys
        ),
        "channel_llm_override": one_round(lambda k: drive(llm_override, k, 6), keys),
        "channel_prompt_none": one_round(lambda k: drive(prompt, k, 5), keys),
    }


def fill_overrides(keys: list[int]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Fill the channel LLM and prompt layers through their own reads; return both.

    In every server channel 6 overrides its LLM, channels 5 and 8 (a thread
    of 5) have no override: the repository reads are replaced (no database),
    and the layers fill as that checkout's code does (per-channel entries, or
    a gate per server and an entry per override).
    """
    import asyncio

    from caches.layers import channel_llm, channel_prompt
    from tomori.domain.repositories import channels as repo

    overridden = {6: 7}
    fakes: dict[str, Any] = {
        "get_channel_llm_overrides": lambda *, server_id, channel_disc_ids: {
            c: overridden[c] for c in channel_disc_ids if c in overridden
        },
        "get_channel_prompt_override": lambda **_: None,
        "channels_with_llm_override": lambda ids: {
            s: frozenset(overridden) for s in ids
        },
        "channels_with_prompt_override": lambda ids: {s: frozenset() for s in ids},
    }
    for name, fake in fakes.items():
        if hasattr(repo, name):  # a checkout without gates lacks the last two
            setattr(repo, name, fake)
    llm, prompt = (
        channel_llm.get_cached_channel_llm,
        channel_prompt.get_cached_channel_prompt,
    )

    async def fill() -> None:
        for key in keys:
            for channel in (5, 6):
                await llm(key, channel)
            await llm(key, 8, parent_disc_id=5)
            await prompt(key, 5)

    asyncio.run(fill())
    return llm, prompt


def print_figures(figures: dict[str, float]) -> None:
    """Print the figures, then each net of the empty coroutine."""
    print(" ".join(f"{name}={ns:.1f}ns" for name, ns in figures.items()))
    base = figures["empty_coroutine"]
    print(
        "net of the empty coroutine: "
        + " ".join(
            f"{name}={ns - base:.1f}ns"
            for name, ns in figures.items()
            if name != "empty_coroutine"
        )
    )


def alone(root: Path) -> None:
    """Print the best of ROUNDS rounds of each figure in `root`."""
    rounds = setup(root)
    print_figures(
        {name: min(run() for _ in range(ROUNDS)) for name, run in rounds.items()}
    )


def worker(root: Path, calls: int) -> None:
    """Answer each figure name read from stdin with one round's ns (JSON)."""
    TIMING.update(calls=calls, clock=time.thread_time)
    # Both sides on one core: neither gets a quieter or faster one.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rounds = setup(root)
    print(json.dumps(list(rounds)), flush=True)
    for line in sys.stdin:
        print(json.dumps(rounds[line.strip()]()), flush=True)


def compare(base: Path, rounds: int, calls: int) -> None:
    """Time this tree against `base`, interleaved; print the best of each and ratios."""
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"load average at start: {os.getloadavg()}")
    sides = {"this tree": HERE, "base": base.resolve()}
    procs = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--worker", str(path), "--calls", str(calls)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            # One string-hash layout for both sides' dicts (module globals).
            env={**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
        )
        for name, path in sides.items()
    }
    names = [json.loads(_ask(proc, None)) for proc in procs.values()][0]
    best = {name: dict.fromkeys(sides, float("inf")) for name in names}
    try:
        for round_no in range(rounds):
            order = list(sides) if round_no % 2 == 0 else list(sides)[::-1]
            for name in names:
                for side in order:
                    ns = json.loads(_ask(procs[side], name))
                    best[name][side] = min(best[name][side], ns)
    finally:
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    _print_comparison(best, rounds, calls)


def _ask(proc: subprocess.Popen[str], name: str | None) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    if name is not None:
        proc.stdin.write(name + "\n")
        proc.stdin.flush()
    return proc.stdout.readline()


def _print_comparison(
    best: dict[str, dict[str, float]], rounds: int, calls: int
) -> None:
    empty = best["empty_coroutine"]
    print(
        f"best of {rounds} interleaved rounds of {calls:,} hits "
        "(thread CPU time), ns per hit:"
    )
    print(f"  {'figure':<24} {'this tree':>10} {'base':>10} {'this/base':>10}")
    for name, figures in best.items():
        mine, theirs = figures["this tree"], figures["base"]
        print(f"  {name:<24} {mine:10.1f} {theirs:10.1f} {mine / theirs:9.3f}x")
    print("net of the empty coroutine:")
    for name, figures in best.items():
        if name == "empty_coroutine":
            continue
        mine = figures["this tree"] - empty["this tree"]
        theirs = figures["base"] - empty["base"]
        print(f"  {name:<24} {mine:10.1f} {theirs:10.1f} {mine / theirs:9.3f}x")
    print(f"load average at end: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=HERE)
    parser.add_argument("--base", type=Path, help="a checkout to compare with")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--calls", type=int, default=10_000, help="hits per round")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.calls)
    elif args.base:
        compare(args.base, args.rounds, args.calls)
    else:
        alone(args.root)


if __name__ == "__main__":
    main()
