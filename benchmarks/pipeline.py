"""Benchmark the message pipeline: warm caches vs. no caching, and memory at scale.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/pipeline.py [--quick] [--scenario production]

Phase 1, throughput (this process): the real discord.py client connects to
an in-process simulated Discord to load the scenario's guilds, then each
message is a simulator MESSAGE_CREATE payload handed to discord.py's own
`parse_message_create` (what the gateway does, minus the websocket and
JSON), whose on_message runs the real pipeline. A stream of messages is run
once to warm the caches, then replayed warm; the uncached run clears every
registered cache before each message, so every read goes to the database.
Database statements are counted on every thread's connection; short-term
memory's write-behind upserts (queued, off the message path) are counted
apart from the message path's own queries.

Phase 2, memory (a child process, so the RSS is a bot worker's alone): the
simulator runs in a grandchild process and the real TomoriClient connects to
it over loopback; the child asks for traffic in batches of --batch (50), at
most two in flight, since discord.py has no backpressure (a flood would queue
unboundedly many handler tasks, which no production gateway sends: the
scenario's rate is 50 messages/s). It samples RSS as messages are processed,
with discord.py's sweepers scheduled as in the worker.

Bars (PASS/FAIL): warm path 0 database queries per message for a repeat
(server, user, channel); warm throughput >= 20x uncached; RSS <= 200 MB with
every cache warm, and flat within 5% from the 100,000th to the 1,000,000th
message (a --quick run judges neither memory bar: its caches are still
filling). Exits 1 on a FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tomori_bench")
# The benchmark must not publish invalidations to workers on the shared Redis.
os.environ["REDIS_URL"] = ""

RSS_BAR_MB = 200.0
FLAT_BAR = 0.05
SPEEDUP_BAR = 20.0
SPEC_APP_ENTRIES = 6_500
SPEC_DISCORD_ENTRIES = 90_900
TOKEN = "simulated-token"


def rss_mb() -> float:
    """Return this process's resident set size in MB (from /proc/self/statm)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _setup_django() -> None:
    import django

    django.setup()


# ------------------------------------------------------------------ database


def ensure_database(scenario_name: str) -> dict[str, int]:
    """Create and migrate the database if needed, then seed the scenario's guilds."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    from tomori.bot.demo import seed_world
    from tomori.bot.simulator import Scenario, generate_world

    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("postgresql"):
        dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
            ).fetchone()
            if not found:
                conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
    call_command("migrate", verbosity=0)
    return seed_world(generate_world(Scenario.named(scenario_name)))


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
    """Count statements on this thread's and the database thread's connection."""
    from asgiref.sync import sync_to_async
    from django.db import connection

    def install() -> None:
        if counter not in connection.execute_wrappers:
            connection.execute_wrappers.append(counter)

    install()
    await sync_to_async(install)()  # the thread every run_db call uses


# ------------------------------------------------------------------ phase 1


class TimedPipeline:
    """Wraps MessagePipeline.handle to record each message's latency."""

    def __init__(self, pipeline: Any) -> None:
        self.pipeline = pipeline
        self.latencies: list[float] = []
        original = pipeline.handle

        async def timed(message: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(message)
            finally:
                self.latencies.append(time.perf_counter() - started)

        pipeline.handle = timed


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000.0


async def _drive(
    client: Any,
    payloads: list[dict[str, Any]],
    *,
    before: Callable[[], Any] | None = None,
) -> float:
    """Parse each payload as the gateway would and wait for its turn; return seconds."""
    state, pipeline = client._connection, client.pipeline
    started = time.perf_counter()
    for payload in payloads:
        if before is not None:
            before()
        target = pipeline.counters.processed + 1
        state.parse_message_create(payload)
        await pipeline.wait_processed(target)
    return time.perf_counter() - started


def _fresh(sim: Any, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the same messages again under new ids (a replay of the stream)."""
    copies = []
    for payload in payloads:
        copy = dict(payload)
        copy["id"] = str(sim.ids.next())
        copies.append(copy)
    return copies


async def run_phase(
    client: Any,
    timed: TimedPipeline,
    counter: QueryCounter,
    payloads: list[Any],
    **kw: Any,
) -> dict[str, Any]:
    """Drive payloads and return rate, latency percentiles and statements per message."""
    from caches.layers.short_term_memory import flush_pending_writes

    timed.latencies.clear()
    path0, behind0 = counter.snapshot()
    seconds = await _drive(client, payloads, **kw)
    await flush_pending_writes()
    path, behind = counter.snapshot()
    count = len(payloads)
    return {
        "messages": count,
        "seconds": round(seconds, 3),
        "per_second": round(count / seconds, 1),
        "p50_ms": round(_percentile(timed.latencies, 0.50), 3),
        "p99_ms": round(_percentile(timed.latencies, 0.99), 3),
        "path_queries_per_message": round((path - path0) / count, 4),
        "write_behind_per_message": round((behind - behind0) / count, 4),
    }


def _repeat_payload(payloads: list[Any], responder: Any) -> dict[str, Any]:
    """Return a payload of the stream whose turn was OK (a configured triple)."""
    ok = {t.message_id for t in responder.last if t.outcome == "ok"}
    for payload in reversed(payloads):
        if int(payload["id"]) in ok:
            return payload
    raise RuntimeError("no OK turn in the warm-up stream")


async def throughput(
    scenario_name: str, warm_count: int, cold_count: int
) -> dict[str, Any]:
    """Phase 1: warm vs. uncached throughput, latency and queries per message."""
    from caches.registry import registry
    from tomori.bot.client import build_client, skip_identify_wait
    from tomori.bot.pipeline import MessagePipeline
    from tomori.bot.pipeline.responder import RecordingResponder
    from tomori.bot.simulator import Scenario, SimulatedDiscord, pointed_at

    registry.clear_all()
    sim = SimulatedDiscord(Scenario.named(scenario_name))
    await sim.start()
    responder = RecordingResponder(keep_last=warm_count)
    pipeline = MessagePipeline(responder=responder)
    timed = TimedPipeline(pipeline)
    counter = QueryCounter()
    await install_counter(counter)
    with pointed_at(sim):
        client = build_client(
            pipeline=pipeline,
            before_identify_hook=skip_identify_wait,
            guild_ready_timeout=0.05,
        )
        task = asyncio.create_task(client.start(TOKEN))
        await asyncio.wait_for(client.ready_event.wait(), 120)
        stream = [sim.planned_payload(sim.traffic.next()) for _ in range(warm_count)]
        results = {"warm_up": await run_phase(client, timed, counter, stream)}
        repeat = [_repeat_payload(stream, responder)] * min(warm_count, 2000)
        results["warm"] = await run_phase(client, timed, counter, _fresh(sim, stream))
        results["repeat"] = await run_phase(client, timed, counter, _fresh(sim, repeat))
        results["uncached"] = await run_phase(
            client,
            timed,
            counter,
            _fresh(sim, stream[:cold_count]),
            before=registry.clear_all,
        )
        results["turns"] = responder.snapshot()
        results["pipeline"] = pipeline.counters.as_dict()
        await client.close()
        await task
    await sim.stop()
    return results


# ------------------------------------------------------------------ phase 2


async def serve_simulator(scenario_name: str) -> None:
    """Grandchild: serve the simulator; send N messages per "N" line read on stdin."""
    from tomori.bot.simulator import Scenario, SimulatedDiscord

    sim = SimulatedDiscord(Scenario.named(scenario_name))
    await sim.start()
    print(f"urls {sim.base_url} {sim.gateway_url}", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    while line := await reader.readline():
        delivered = await sim.send_messages(int(line))
        print(f"sent {delivered}", flush=True)
    await sim.stop()


class SimulatorProcess:
    """The simulator grandchild, asked for traffic over its stdin."""

    def __init__(self, scenario_name: str) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve-simulator",
                "--scenario",
                scenario_name,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        line = self._readline()
        match = re.match(r"urls (\S+) (\S+)", line)
        if match is None:
            raise RuntimeError(f"simulator said {line!r}")
        self.base_url, self.gateway_url = match.groups()

    def _readline(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def request(self, count: int) -> None:
        """Ask for `count` more messages (answered by a "sent" line, read later)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()

    async def sent(self) -> int:
        """Return how many messages the last request delivered."""
        line = await asyncio.get_running_loop().run_in_executor(None, self._readline)
        return int(line.split()[1])

    def stop(self) -> None:
        """End the simulator."""
        self.process.terminate()
        self.process.wait(10)


async def memory_run(scenario_name: str, total: int, batch: int) -> dict[str, Any]:
    """Phase 2 (a child process): RSS of a real client + pipeline under traffic."""
    from caches.discord_caches import count_discord_caches, run_discord_sweepers
    from caches.registry import registry
    from tomori.bot.client import build_client, skip_identify_wait
    from tomori.bot.pipeline import MessagePipeline
    from tomori.bot.simulator import pointed_at

    samples: list[tuple[int, float]] = [(0, rss_mb())]
    sim = SimulatorProcess(scenario_name)
    pipeline = MessagePipeline()
    with pointed_at((sim.base_url, sim.gateway_url)):
        client = build_client(
            pipeline=pipeline, before_identify_hook=skip_identify_wait
        )
        task = asyncio.create_task(client.start(TOKEN))
        await asyncio.wait_for(client.ready_event.wait(), 300)
        stop = asyncio.Event()
        sweepers = asyncio.create_task(run_discord_sweepers(client, stop=stop))
        ready_rss = rss_mb()
        started = time.perf_counter()
        requested = delivered = 0
        every = max(batch, total // 20)
        while delivered < total:
            sim.request(min(batch, total - delivered))
            delivered += await sim.sent()
            # Keep at most two batches in flight: discord.py has no backpressure.
            await pipeline.wait_processed(max(0, delivered - batch), timeout=600)
            if delivered // every > requested // every:
                samples.append((pipeline.counters.processed, rss_mb()))
                print("memory run:", *samples[-1], "MB", file=sys.stderr, flush=True)
            requested = delivered
        await pipeline.wait_processed(delivered, timeout=600)
        seconds = time.perf_counter() - started
        samples.append((pipeline.counters.processed, rss_mb()))
        result = {
            "messages": delivered,
            "seconds": round(seconds, 1),
            "per_second": round(delivered / seconds, 1),
            "ready_rss_mb": round(ready_rss, 1),
            "samples": [(n, round(mb, 1)) for n, mb in samples],
            "cache_sizes": registry.sizes(),
            "discord": count_discord_caches(client),
            "pipeline": pipeline.counters.as_dict(),
        }
        stop.set()
        await sweepers
        await client.close()
        await task
    sim.stop()
    return result


def run_memory_child(scenario_name: str, total: int, batch: int) -> dict[str, Any]:
    """Run phase 2 in a fresh process and return its JSON result."""
    process = subprocess.run(
        [
            sys.executable,
            __file__,
            "--memory-run",
            "--scenario",
            scenario_name,
            "--memory-messages",
            str(total),
            "--batch",
            str(batch),
        ],
        stdout=subprocess.PIPE,  # its progress goes to our stderr as it runs
        text=True,
        cwd=ROOT,
        check=False,
    )
    if process.returncode != 0:
        raise RuntimeError(f"memory run failed (exit {process.returncode})")
    return json.loads(process.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ report


def _rss_at(samples: list[list[float]], count: int) -> float:
    """Return the RSS of the sample taken nearest to the `count`th message."""
    return min(samples, key=lambda sample: abs(sample[0] - count))[1]


Bar = tuple[str, bool | None, str]  # label, passed (None: not judged), figure


def report(results: dict[str, Any], *, flat_from: int | None) -> bool:
    """Print the figures and a PASS/FAIL line per bar; return whether all passed."""
    t = results["throughput"]
    print("\n== throughput (discord.py parse + pipeline, PostgreSQL) ==")
    print(
        f"{'run':10} {'msgs':>7} {'msg/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'path q/msg':>11} {'stm writes/msg':>15}"
    )
    for name in ("warm_up", "warm", "repeat", "uncached"):
        r = t[name]
        print(
            f"{name:10} {r['messages']:>7} {r['per_second']:>9} {r['p50_ms']:>8} "
            f"{r['p99_ms']:>8} {r['path_queries_per_message']:>11} "
            f"{r['write_behind_per_message']:>15}"
        )
    print(f"turns: {t['turns']}")
    speedup = t["warm"]["per_second"] / t["uncached"]["per_second"]
    bars: list[Bar] = [
        (
            "warm repeat (server, user, channel): 0 path queries/message",
            t["repeat"]["path_queries_per_message"] == 0,
            f"{t['repeat']['path_queries_per_message']}",
        ),
        (
            f"warm throughput >= {SPEEDUP_BAR:.0f}x uncached",
            speedup >= SPEEDUP_BAR,
            f"{speedup:.1f}x",
        ),
    ]
    m = results.get("memory")
    if m is not None:
        bars += _memory_report(m, flat_from)
    print("\n== bars ==")
    for label, passed, figure in bars:
        verdict = "SKIP" if passed is None else "PASS" if passed else "FAIL"
        print(f"{verdict}  {label}: {figure}")
    return all(passed is not False for _, passed, _ in bars)


def _memory_report(m: dict[str, Any], flat_from: int | None) -> list[Bar]:
    """Print the memory figures; return the memory bars (None flat_from: quick run)."""
    samples = m["samples"]
    app = sum(m["cache_sizes"].values())
    discord_total = sum(v for k, v in m["discord"].items() if k != "discord_guilds")
    print("\n== memory (real client over loopback, simulator in another process) ==")
    print(
        f"{m['messages']} messages in {m['seconds']} s ({m['per_second']} msg/s); "
        f"RSS at ready {m['ready_rss_mb']} MB"
    )
    print("RSS samples (messages, MB):", samples)
    print(
        f"app cache entries: {app} (spec ~{SPEC_APP_ENTRIES:,}); "
        f"discord.py entries: {discord_total} (spec ~{SPEC_DISCORD_ENTRIES:,})"
    )
    print("per cache:", json.dumps(m["cache_sizes"]))
    print("discord.py:", json.dumps(m["discord"]))
    print("pipeline:", json.dumps(m["pipeline"]))
    peak = max(mb for _, mb in samples)
    if flat_from is None:  # a quick run ends while the caches are still filling
        note = "not judged on a quick run (caches still filling)"
        return [(f"RSS <= {RSS_BAR_MB:.0f} MB", None, f"peak {peak} MB, {note}")]
    start, end = _rss_at(samples, flat_from), samples[-1][1]
    drift = (end - start) / start
    return [
        (
            f"RSS <= {RSS_BAR_MB:.0f} MB with every cache warm",
            peak <= RSS_BAR_MB,
            f"peak {peak} MB",
        ),
        (
            f"RSS flat within {FLAT_BAR:.0%} from message {flat_from:,} to "
            f"{m['messages']:,}",
            abs(drift) <= FLAT_BAR,
            f"{start} -> {end} MB ({drift:+.1%})",
        ),
    ]


def parse_args() -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages")
    parser.add_argument("--scenario", default="production")
    parser.add_argument("--warm-messages", type=int, default=None)
    parser.add_argument("--uncached-messages", type=int, default=None)
    parser.add_argument("--memory-messages", type=int, default=None)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--serve-simulator", action="store_true", help=argparse.SUPPRESS
    )
    return parser.parse_args()


def main() -> int:
    """Run the benchmark (or one of its child roles)."""
    options = parse_args()
    if options.serve_simulator:
        asyncio.run(serve_simulator(options.scenario))
        return 0
    _setup_django()
    import logging

    logging.basicConfig(level=logging.ERROR)
    memory_total = options.memory_messages or (20_000 if options.quick else 1_000_000)
    if options.memory_run:
        result = asyncio.run(memory_run(options.scenario, memory_total, options.batch))
        print(json.dumps(result))
        return 0
    warm = options.warm_messages or (1_000 if options.quick else 5_000)
    cold = options.uncached_messages or (200 if options.quick else 1_000)
    print("seed:", ensure_database(options.scenario))
    results: dict[str, Any] = {
        "throughput": asyncio.run(throughput(options.scenario, warm, cold))
    }
    if not options.skip_memory:
        results["memory"] = run_memory_child(
            options.scenario, memory_total, options.batch
        )
    flat_from = None if options.quick else min(100_000, memory_total // 10)
    return 0 if report(results, flat_from=flat_from) else 1


if __name__ == "__main__":
    sys.exit(main())
