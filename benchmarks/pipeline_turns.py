"""Phase 1 of benchmarks/pipeline.py: turns in rounds, old build vs new, a CPU neighbour.

In-process (this build): each round runs, one after the other,
  first pass  the caches cleared and re-warmed as at worker start (LLM
              cache, preset avatars), then a stream of messages whose
              (server, author, channel) tuple this run has never sent;
  warm        the same stream again under new message ids;
  repeat      one OK message of the stream, again and again;
  cleared     a prefix of the stream with every registered cache cleared
              before each message (short-term memory and the LLM cache
              included): the every-cache-cleared variant.
Medians over the rounds are reported, so machine load moves every phase alike.

Child processes: one runs this build, one the old build (a checkout given
by --base-root, imported instead of this tree); each warms its own stream
once, then answers "round" lines with one warm replay's handle() latencies.
The parent alternates them round by round, and then runs the new build's
rounds alternately on a quiet machine and beside a CPU-bound neighbour
process. Short-term memory's durable write-behind is on in every round,
writing to PostgreSQL (its statements are counted apart).

Once the client is ready, a build whose worker freezes its start-up heap out
of the cyclic GC's full collections (tomori.bot.gc_policy, this build) does
so here too, as its worker does at gateway ready; the old main's does not.
This module imports no project code at import time: a child imports the
build its sys.path points at.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN = "simulated-token"


# ------------------------------------------------------------------ measuring


class QueryCounter:
    """A Django execute wrapper that counts statements, STM write-behind apart."""

    def __init__(self) -> None:
        self.path = 0  # the message path's own statements (reads and writes)
        self.write_behind = 0  # short-term memory's queued durable upserts

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        head = sql.lstrip()[:6].upper()
        if head in ("INSERT", "UPDATE", "DELETE") and "short_term_memory" in sql:
            self.write_behind += 1
        else:
            self.path += 1
        return execute(sql, *args)

    def snapshot(self) -> tuple[int, int]:
        """Return (path, write_behind) so far."""
        return self.path, self.write_behind


async def install_counter(counter: QueryCounter) -> None:
    """Count statements on this thread's and each database thread's connection."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def install() -> None:
        if counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(counter)

    install()
    await sync_to_async(install)()  # the thread every run_db call uses
    try:  # a build whose write-behind has a thread of its own (this one)
        from caches.database import WRITES
    except ImportError:  # the old main: its writes use the thread above
        return
    await asyncio.get_running_loop().run_in_executor(WRITES, install)


class TimedPipeline:
    """Wraps MessagePipeline.handle to record each message's latency and CPU time.

    The latency (wall clock) is what a message waits; the CPU time (this
    thread's, read outside the wall clock's window) is what the turn costs,
    whatever else the machine runs, so it compares builds on a loaded host.
    """

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.latencies: list[float] = []
        self.cpu: list[float] = []
        original = pipeline.handle
        wall, cpu = time.perf_counter, time.thread_time

        async def timed(message: Any) -> Any:
            cpu_started = cpu()
            started = wall()
            try:
                return await original(message)
            finally:
                self.latencies.append(wall() - started)
                self.cpu.append(cpu() - cpu_started)

        pipeline.handle = timed


def percentile_ms(values: list[float], share: float) -> float:
    """Return the `share` percentile of `values` (seconds) in ms."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000.0


def latency_figures(latencies: list[float], cpu: list[float]) -> dict[str, float]:
    """Return mean (us), p50, p99 and max (ms) of handle() latencies (seconds),
    and the mean CPU time (us)."""
    return {
        "mean_us": round(statistics.fmean(latencies) * 1e6, 2),
        "cpu_us": round(statistics.fmean(cpu) * 1e6, 2),
        "p50_ms": round(percentile_ms(latencies, 0.50), 4),
        "p99_ms": round(percentile_ms(latencies, 0.99), 4),
        "max_ms": round(max(latencies) * 1000.0, 3),
    }


@dataclass
class Harness:
    """The simulated Discord, the real client and the timed pipeline of one build."""

    sim: Any
    client: Any
    timed: TimedPipeline
    counter: QueryCounter
    responder: Any
    task: Any = None
    seen: set[tuple[int, int, int]] = field(default_factory=set)

    async def drive(
        self, payloads: list[dict[str, Any]], before: Callable[[], Any] | None = None
    ) -> float:
        """Parse each payload as the gateway would and wait for its turn; return s."""
        state, pipeline = self.client._connection, self.client.pipeline
        started = time.perf_counter()
        for payload in payloads:
            if before is not None:
                before()
            target = pipeline.counters.processed + 1
            state.parse_message_create(payload)
            await pipeline.wait_processed(target)
        return time.perf_counter() - started

    def fresh(self, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return the same messages again under new ids (a replay of the stream)."""
        return [{**payload, "id": str(self.sim.ids.next())} for payload in payloads]

    def novel_stream(self, count: int) -> list[dict[str, Any]]:
        """Return `count` payloads whose (server, author, channel) this run never sent."""
        stream: list[dict[str, Any]] = []
        for _ in range(count * 200):  # bounded: the scenario has ~32,000 members
            planned = self.sim.traffic.next()
            author = planned.author.user.id if planned.author else planned.webhook.id
            triple = (planned.guild.id, author, planned.channel_id)
            if triple not in self.seen:
                self.seen.add(triple)
                stream.append(self.sim.planned_payload(planned))
                if len(stream) == count:
                    return stream
        raise RuntimeError(f"only {len(stream)} new (server, user, channel) tuples")

    async def phase(
        self, payloads: list[Any], before: Callable[[], Any] | None = None
    ) -> dict[str, Any]:
        """Drive payloads; return rate, latencies and statements per message."""
        from caches.layers.short_term_memory import flush_pending_writes

        self.timed.latencies.clear()
        self.timed.cpu.clear()
        path0, behind0 = self.counter.snapshot()
        seconds = await self.drive(payloads, before)
        await flush_pending_writes()  # after the clock: the round's writes land
        path, behind = self.counter.snapshot()
        count = len(payloads)
        return {
            "messages": count,
            "per_second": round(count / seconds, 1),
            **latency_figures(self.timed.latencies, self.timed.cpu),
            "latencies": list(self.timed.latencies),
            "cpu": list(self.timed.cpu),
            "path_queries_per_message": round((path - path0) / count, 3),
            "write_behind_per_message": round((behind - behind0) / count, 4),
        }

    def ok_payload(self, payloads: list[Any]) -> dict[str, Any]:
        """Return a payload of `payloads` whose turn was OK (a configured triple)."""
        ok = {t.message_id for t in self.responder.last if t.outcome == "ok"}
        for payload in reversed(payloads):
            if int(payload["id"]) in ok:
                return payload
        raise RuntimeError("no OK turn in the stream")


async def start_harness(scenario_name: str, keep_last: int) -> Harness:
    """Start the simulator and the real client (a worker's pipeline) on it."""
    from caches.registry import registry
    from tomori.bot.client import build_client, skip_identify_wait
    from tomori.bot.pipeline import MessagePipeline
    from tomori.bot.simulator import Scenario, SimulatedDiscord, pointed_at

    try:
        from tomori.bot.pipeline.responder import RecordingResponder
    except ImportError:  # the old main's layout (the comparison build)
        from tomori.bot.responder import RecordingResponder  # type: ignore

    registry.clear_all()
    sim = SimulatedDiscord(Scenario.named(scenario_name))
    await sim.start()
    responder = RecordingResponder(keep_last=keep_last)
    pipeline = MessagePipeline(responder=responder)
    harness = Harness(sim, None, TimedPipeline(pipeline), QueryCounter(), responder)
    await install_counter(harness.counter)
    with pointed_at(sim):
        harness.client = build_client(
            pipeline=pipeline,
            before_identify_hook=skip_identify_wait,
            guild_ready_timeout=0.05,
        )
        harness.task = asyncio.create_task(harness.client.start(TOKEN))
        await asyncio.wait_for(harness.client.ready_event.wait(), 120)
    try:  # what a worker does once every guild has arrived
        from tomori.bot.gc_policy import freeze_start_up
    except ImportError:  # a build whose worker does not (the old main)
        pass
    else:
        freeze_start_up()
    return harness


async def stop_harness(harness: Harness) -> None:
    """Close the client and the simulator."""
    await harness.client.close()
    await harness.task
    await harness.sim.stop()


async def cold_start() -> None:
    """Clear every cache, then warm what a worker warms at start."""
    from caches.layers.llm import initialize_llm_cache
    from caches.layers.preset_avatar import initialize_preset_avatar_cache
    from caches.registry import registry

    registry.clear_all()
    await initialize_llm_cache()
    await initialize_preset_avatar_cache()


# ------------------------------------------------------------------ in process


async def in_process_rounds(
    scenario_name: str, *, rounds: int, stream: int, cleared: int
) -> dict[str, Any]:
    """Run first pass, warm, repeat and cleared phases in `rounds` rounds."""
    harness = await start_harness(scenario_name, keep_last=stream)
    phases: dict[str, list[dict[str, Any]]] = {
        name: [] for name in ("first_pass", "warm", "repeat", "cleared")
    }
    from caches.registry import registry

    for number in range(rounds):
        payloads = harness.novel_stream(stream)
        await cold_start()
        phases["first_pass"].append(await harness.phase(payloads))
        repeat = [harness.ok_payload(payloads)] * stream
        phases["warm"].append(await harness.phase(harness.fresh(payloads)))
        phases["repeat"].append(await harness.phase(harness.fresh(repeat)))
        phases["cleared"].append(
            await harness.phase(
                harness.fresh(payloads[:cleared]), before=registry.clear_all
            )
        )
        print(f"in-process round {number + 1}/{rounds} done", file=sys.stderr)
    await stop_harness(harness)
    return {name: median_phase(results) for name, results in phases.items()}


def median_phase(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the per-round median of each figure (latencies pooled for p99)."""
    pooled = [x for r in results for x in r["latencies"]]
    figures = {
        key: round(statistics.median(r[key] for r in results), 4)
        for key in results[0]
        if key not in ("latencies", "cpu")
    }
    return figures | {
        "rounds": len(results),
        "pooled_p99_ms": round(percentile_ms(pooled, 0.99), 4),
        "per_round_per_second": [r["per_second"] for r in results],
    }


# ------------------------------------------------------------------ children


async def serve_rounds(scenario_name: str, stream: int) -> None:
    """Child: warm a stream once, then answer each "round" line with a warm replay."""
    from caches.layers.short_term_memory import short_term_memory_store

    harness = await start_harness(scenario_name, keep_last=10)
    payloads = harness.novel_stream(stream)
    await harness.phase(payloads)  # the first pass: every cache of the stream
    writer = short_term_memory_store().writer
    print(json.dumps({"ready": True}), flush=True)
    loop = asyncio.get_running_loop()
    while (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        batches = getattr(writer, "batches", 0)
        result = await harness.phase(harness.fresh(payloads))
        result["write_behind_batches"] = getattr(writer, "batches", 0) - batches
        print(json.dumps(result), flush=True)
    await stop_harness(harness)


class RoundsChild:
    """A child process serving warm rounds for the build at `code_root`."""

    def __init__(
        self, script: Path, code_root: Path, scenario: str, stream: int, env: dict
    ) -> None:
        self.code_root = code_root
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(script),
                "--serve-rounds",
                "--code-root",
                str(code_root),
                "--scenario",
                scenario,
                "--stream",
                str(stream),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=code_root,
            env=env,
        )

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"round child ({self.code_root}) exited")
        return json.loads(line)  # type: ignore[no-any-return]

    def ready(self) -> None:
        """Wait until the child has warmed its stream."""
        self._read()

    def round(self) -> dict[str, Any]:
        """Run one warm round in the child; return its figures and latencies."""
        assert self.process.stdin is not None
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        return self._read()

    def stop(self) -> None:
        """End the child (an empty line, then its exit)."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        self.process.wait(60)


@contextmanager
def cpu_neighbour() -> Iterator[None]:
    """Run a CPU-bound process beside the block (killed after it, by its pid)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)  # let the scheduler see it before the round starts
        yield
    finally:
        spinner.kill()
        spinner.wait()


def database_url_for(suffix: str) -> str:
    """Return DATABASE_URL with `suffix` appended to its database name."""
    url = os.environ["DATABASE_URL"]
    head, _, rest = url.rpartition("/")
    name, sep, query = rest.partition("?")
    return f"{head}/{name}{suffix}{sep}{query}"


def child_rounds(
    script: Path,
    *,
    roots: dict[str, Path],
    scenario: str,
    stream: int,
    rounds: int,
    neighbour_rounds: int,
) -> dict[str, Any]:
    """Alternate warm rounds of each build's child, then the new one with a neighbour.

    The old build gets its own database (`<name>_base`), migrated and seeded
    by its own code, so a newer migration never breaks it.
    """
    children: dict[str, RoundsChild] = {}
    for label, root in roots.items():
        env = dict(os.environ)
        if label != "new":
            env["DATABASE_URL"] = database_url_for("_base")
        children[label] = RoundsChild(script, root, scenario, stream, env)
    for child in children.values():
        child.ready()
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in children}
    labels = list(children)
    for number in range(rounds):
        order = labels if number % 2 == 0 else labels[::-1]
        for label in order:
            results[label].append(children[label].round())
    loaded: dict[str, list[dict[str, Any]]] = {"quiet": [], "neighbour": []}
    for number in range(neighbour_rounds):
        for condition in (
            ("quiet", "neighbour") if number % 2 else ("neighbour", "quiet")
        ):
            if condition == "quiet":
                loaded[condition].append(children["new"].round())
                continue
            with cpu_neighbour():
                loaded[condition].append(children["new"].round())
    for child in children.values():
        child.stop()
    return {
        "builds": {label: pooled(r) for label, r in results.items()},
        "load": {label: pooled(r) for label, r in loaded.items() if r},
    }


def pooled(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the figures of every round's latencies together, and per-round means."""
    latencies = [x for r in results for x in r["latencies"]]
    cpu = [x for r in results for x in r["cpu"]]
    return latency_figures(latencies, cpu) | {
        "rounds": len(results),
        "messages": len(latencies),
        "round_means_us": [r["mean_us"] for r in results],
        "median_round_mean_us": round(
            statistics.median(r["mean_us"] for r in results), 2
        ),
        "path_queries_per_message": statistics.median(
            r["path_queries_per_message"] for r in results
        ),
        "write_behind_per_message": round(
            statistics.median(r["write_behind_per_message"] for r in results), 4
        ),
        "write_behind_batches": sum(r.get("write_behind_batches", 0) for r in results),
    }


# ------------------------------------------------------------------ report

Bar = tuple[str, bool | None, str]  # label, passed (None: not judged), figure

SPEEDUP_BAR = 20.0
MEAN_BAR_US = 50.0
#: The old main's warm handle() mean where that bar was set (issue 17), and
#: its commit: the rescaled bar is judged only against that build.
ISSUE_OLD_MEAN_US = 91.5
ISSUE_OLD_COMMIT = "befb11d"
P99_BAR_MS = 1.0
PHASES = ("first_pass", "warm", "repeat", "cleared")


def _row(name: str, r: dict[str, Any]) -> str:
    return (
        f"{name:11} {r['messages']:>6} {r['per_second']:>9} {r['mean_us']:>9} "
        f"{r['cpu_us']:>9} "
        f"{r['p50_ms']:>8} {r['p99_ms']:>8} {r['path_queries_per_message']:>11} "
        f"{r['write_behind_per_message']:>15}"
    )


def _header(first: str) -> str:
    return (
        f"{first:11} {'msgs':>6} {'msg/s':>9} {'mean us':>9} {'cpu us':>9} "
        f"{'p50 ms':>8} "
        f"{'p99 ms':>8} {'path q/msg':>11} {'stm writes/msg':>15}"
    )


def turns_report(phases: dict[str, Any]) -> list[Bar]:
    """Print the in-process phases (medians of the rounds); return their bars."""
    rounds = phases["warm"]["rounds"]
    print(
        f"\n== turns, this build in-process: median of {rounds} interleaved rounds =="
    )
    print("   (each round: first pass, warm, repeat, cleared; msgs per round)")
    print(_header("phase"))
    for name in PHASES:
        print(_row(name, phases[name]))
    first, cleared, warm = (phases[n] for n in ("first_pass", "cleared", "warm"))
    extra = cleared["path_queries_per_message"] - first["path_queries_per_message"]
    print(
        f"uncached baselines: (a) genuine first pass "
        f"{first['path_queries_per_message']} path queries/message (caches cold but "
        f"the LLM cache and preset avatars, warmed at start; every (server, user, "
        f"channel) new); (b) every cache cleared before each message "
        f"{cleared['path_queries_per_message']}: {extra:+.2f} queries/message, the "
        f"reloads of caches a first pass finds warm (LLM cache, server-wide and "
        f"short-term-memory entries)"
    )
    for name in ("first_pass", "cleared"):
        print(f"msg/s per round, {name}:", phases[name]["per_round_per_second"])
    print("msg/s per round, warm:", warm["per_round_per_second"])
    vs_first = warm["per_second"] / first["per_second"]
    vs_cleared = warm["per_second"] / cleared["per_second"]
    print(f"warm throughput: {vs_first:.1f}x (a) first pass, {vs_cleared:.1f}x (b)")
    repeat = phases["repeat"]["path_queries_per_message"]
    return [
        (
            "warm repeat (server, user, channel): 0 path queries/message",
            repeat == 0,
            f"{repeat}",
        ),
        (
            f"warm throughput >= {SPEEDUP_BAR:.0f}x uncached (a) first pass",
            vs_first >= SPEEDUP_BAR,
            f"{vs_first:.1f}x ((b) cleared: {vs_cleared:.1f}x)",
        ),
    ]


def mean_bars(
    new: dict[str, Any], old: dict[str, Any], *, old_commit: str
) -> list[Bar]:
    """Return the mean bar, judged at the old main's speed where it was set.

    The bar (50 us where the old main measured 91.5 us) is a ratio to the
    old main, not a property of one host: this build's mean is rescaled by
    its ratio to the old main's in this same run. The larger of the pooled
    mean's and the median round mean's ratio is judged, so a few slow old
    rounds cannot pass it alone. The absolute mean is printed beside it,
    not judged when an old build ran: on a host where the old main is
    slower than 91.5 us, it measures the host. An old build other than
    ISSUE_OLD_COMMIT (with no local changes) measured no 91.5 us: then the
    rescaled figure is printed, not judged, and the absolute mean is judged.
    """
    reference = old_commit[:7] == ISSUE_OLD_COMMIT and not old_commit.endswith("+")
    ratios = {
        "mean": new["mean_us"] / old["mean_us"],
        "median round": new["median_round_mean_us"] / old["median_round_mean_us"],
    }
    judged = max(ratios.values())
    scaled = judged * ISSUE_OLD_MEAN_US
    host = old["mean_us"] / ISSUE_OLD_MEAN_US
    print(
        f"   rescaled: this build's mean at the {ISSUE_OLD_MEAN_US} us the old "
        f"main measured where the bar was set: {scaled:.1f} us (ratio "
        f"{judged:.3f}, the larger of "
        + ", ".join(f"{name} {r:.3f}" for name, r in ratios.items())
        + f"); by CPU time {new['cpu_us'] / old['cpu_us'] * ISSUE_OLD_MEAN_US:.1f}"
        f" us; the old main takes {host:.2f}x its {ISSUE_OLD_MEAN_US} us here"
    )
    rescaled_label = (
        f"warm handle() mean <= {MEAN_BAR_US:.0f} us at the old main's "
        f"{ISSUE_OLD_MEAN_US} us (this build's mean by its ratio to the old "
        "main's, this run)"
    )
    if not reference:
        rescaled_label += (
            f"; not judged: the old build is {old_commit}, not {ISSUE_OLD_COMMIT}"
        )
    return [
        (
            rescaled_label,
            scaled <= MEAN_BAR_US if reference else None,
            f"{scaled:.1f} us (ratio {judged:.3f} <= "
            f"{MEAN_BAR_US / ISSUE_OLD_MEAN_US:.3f})",
        ),
        (
            f"warm handle() mean, absolute on this host (old main {old['mean_us']} us "
            f"here, {host:.2f}x slower than its {ISSUE_OLD_MEAN_US} us)",
            None if reference else new["mean_us"] <= MEAN_BAR_US,
            f"{new['mean_us']} us (median round {new['median_round_mean_us']} us)",
        ),
    ]


def builds_report(children: dict[str, Any], *, old_commit: str) -> list[Bar]:
    """Print old vs new warm handle() and p99 beside a neighbour; return their bars."""
    builds, load = children["builds"], children["load"]
    print("\n== warm handle(): old main vs this build, one child process each ==")
    print("   (rounds alternated old/new; write-behind on, PostgreSQL; pooled rounds)")
    print(
        f"{'build':6} {'rounds':>6} {'msgs':>6} {'mean us':>8} {'rnd med':>8} {'cpu us':>7} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'path q/msg':>10} "
        f"{'stm w/msg':>9} {'batches':>7}"
    )
    for label, b in builds.items():
        print(
            f"{label:6} {b['rounds']:>6} {b['messages']:>6} {b['mean_us']:>8} "
            f"{b['median_round_mean_us']:>8} {b['cpu_us']:>7} {b['p50_ms']:>7} {b['p99_ms']:>7} "
            f"{b['max_ms']:>7} {b['path_queries_per_message']:>10} "
            f"{b['write_behind_per_message']:>9} {b['write_behind_batches']:>7}"
        )
        print(f"       round means (us): {b['round_means_us']}")
    new = builds["new"]
    bars: list[Bar] = []
    if "old" in builds:
        old = builds["old"]
        print(
            f"new/old: mean {new['mean_us'] / old['mean_us']:.2f}x, median round "
            f"mean {new['median_round_mean_us'] / old['median_round_mean_us']:.2f}x, "
            f"p50 {new['p50_ms'] / old['p50_ms']:.2f}x, p99 "
            f"{new['p99_ms'] / old['p99_ms']:.2f}x, CPU time {new['cpu_us'] / old['cpu_us']:.2f}x"
        )
        print(
            "   (mean us: wall clock, what the bar judges, rescaled; cpu us: the loop "
            "thread's CPU time per handle(), which load does not inflate)"
        )
        bars += mean_bars(new, old, old_commit=old_commit)
    else:  # no old build to rescale by: the absolute mean is all there is
        bars.append(
            (
                f"warm handle() mean <= {MEAN_BAR_US:.0f} us (this build, absolute)",
                new["mean_us"] <= MEAN_BAR_US,
                f"{new['mean_us']} us (median round {new['median_round_mean_us']} us)",
            )
        )
    print(
        "\n== warm p99 of this build, write-behind on: quiet vs a CPU-bound neighbour =="
    )
    print("   (rounds alternated; the neighbour: `python -c 'while True: pass'`)")
    for condition, b in load.items():
        print(
            f"{condition:9} rounds {b['rounds']}  msgs {b['messages']}  mean "
            f"{b['mean_us']} us  cpu {b['cpu_us']} us  p50 {b['p50_ms']} ms  p99 {b['p99_ms']} ms  max "
            f"{b['max_ms']} ms  stm writes/msg {b['write_behind_per_message']}"
        )
        bars.append(
            (
                f"warm p99 <= {P99_BAR_MS:.0f} ms, write-behind on, {condition}",
                b["p99_ms"] <= P99_BAR_MS,
                f"{b['p99_ms']} ms",
            )
        )
    return bars
