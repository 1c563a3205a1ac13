"""Benchmark a frozen PostgreSQL: turn latency during the freeze, SIGTERM exit time, STM kept.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/db_faults.py [--freeze 15] [--rate 50]

The database is reached through a TCP proxy (tests/support/faults.py) that
freezes it: connections stay open, nothing is forwarded, as a paused or
partitioned server.

Phase 1 (this process): the real discord.py client on the simulated Discord
(small scenario), fed --rate messages/s as the gateway would, without waiting
for each turn. 5 s normal, --freeze s frozen, 5 s after. Prints turn latency
p50/p99/max of the turns started during the freeze, and after the flush the
short-term memory keys whose stored turn count differs from memory.

Phase 2 (runbot subprocesses, default knobs): (a) freeze, SIGTERM once the
worker has noticed: exit code, seconds to exit, the "not stored" line;
(b) freeze --freeze s, recover, SIGTERM: exit code and the keys behind
(table vs. the worker's own count). Bars: freeze p99 <= 5 s, exit <= 20 s,
0 keys behind after recovery. Exits 1 on a FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tomori_bench")
os.environ["REDIS_URL"] = ""  # no invalidations to workers on the shared Redis

from tests.support.faults import TcpProxy, proxied_url  # noqa: E402

P99_BAR_S = 5.0
EXIT_BAR_S = 20.0
TOKEN = "simulated-token"


def _proxy_for(url: str) -> TcpProxy:
    parts = urlsplit(url)
    return TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432).start()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if values else 0.0


class Timed:
    """Wraps MessagePipeline.handle to record (start, latency) of each turn."""

    def __init__(self, pipeline: Any) -> None:
        self.samples: list[tuple[float, float]] = []
        original = pipeline.handle

        async def timed(message: Any) -> Any:
            started = time.monotonic()
            try:
                return await original(message)
            finally:
                self.samples.append((started, time.monotonic() - started))

        pipeline.handle = timed


async def _feed(client: Any, sim: Any, *, rate: float, seconds: float) -> None:
    state, end = client._connection, time.monotonic() + seconds
    while time.monotonic() < end:
        state.parse_message_create(sim.planned_payload(sim.traffic.next()))
        await asyncio.sleep(1 / rate)


def _keys_behind() -> tuple[int, int]:
    """Return (keys in memory, keys whose stored turn count differs)."""
    from caches.layers.short_term_memory import (
        ShortTermMemoryEntry,
        short_term_memory_store,
    )
    from tomori.domain.models import ShortTermMemoryRecord

    stored = dict(ShortTermMemoryRecord.objects.values_list("cache_key", "turn_count"))
    memory = {
        key: value.turn_count
        for key, value in short_term_memory_store().cache.items()
        if isinstance(value, ShortTermMemoryEntry)
    }
    return len(memory), sum(1 for k, n in memory.items() if stored.get(k) != n)


async def turn_latency(
    proxy: TcpProxy, *, freeze: float, rate: float
) -> dict[str, Any]:
    """Phase 1: turn latency before, during and after a freeze; STM keys behind."""
    from asgiref.sync import sync_to_async

    from caches.layers.short_term_memory import short_term_memory_store
    from tomori.bot.client import build_client, skip_identify_wait
    from tomori.bot.pipeline import MessagePipeline
    from tomori.bot.pipeline.responder import RecordingResponder
    from tomori.bot.simulator import Scenario, SimulatedDiscord, pointed_at

    sim = SimulatedDiscord(Scenario.named("small"))
    await sim.start()
    pipeline = MessagePipeline(responder=RecordingResponder())
    timed = Timed(pipeline)
    with pointed_at(sim):
        client = build_client(
            pipeline=pipeline,
            before_identify_hook=skip_identify_wait,
            guild_ready_timeout=0.05,
        )
        task = asyncio.create_task(client.start(TOKEN))
        await asyncio.wait_for(client.ready_event.wait(), 120)
        await _feed(client, sim, rate=rate, seconds=5)
        frozen_at = time.monotonic()
        proxy.freeze()
        await _feed(client, sim, rate=rate, seconds=freeze)
        proxy.forward()
        thawed_at = time.monotonic()
        await _feed(client, sim, rate=rate, seconds=5)
        await pipeline.wait_processed(pipeline.counters.received, timeout=30)
        await asyncio.wait_for(short_term_memory_store().flush(), 60)
        keys, behind = await sync_to_async(_keys_behind)()
        await client.close()
        await task
    await sim.stop()
    during = [lat for started, lat in timed.samples if frozen_at <= started < thawed_at]
    return {
        "turns_during_freeze": len(during),
        "p50_s": round(_percentile(during, 0.50), 3),
        "p99_s": round(_percentile(during, 0.99), 3),
        "max_s": round(max(during, default=0.0), 3),
        "pipeline": pipeline.counters.as_dict(),
        "stm_keys": keys,
        "stm_keys_behind": behind,
    }


class Bot:
    """A runbot subprocess whose output is read line by line."""

    def __init__(self, database_url: str) -> None:
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "PYTHONUNBUFFERED": "1",
        }
        cmd = [sys.executable, "manage.py", "runbot", "--simulate", "--fake-openrouter"]
        print("  $", " ".join(cmd[1:]), "(DATABASE_URL through the proxy)")
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []

    def wait_for(self, text: str) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if text in line:
                return line
        raise RuntimeError(
            f"runbot ended before {text!r}:\n{''.join(self.lines[-40:])}"
        )

    def terminate(self) -> tuple[int, float]:
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stdout is not None
        self.lines.extend(self.proc.stdout)
        code = self.proc.wait(60)
        return code, time.monotonic() - started

    def line(self, text: str) -> str:
        return next((line.strip() for line in self.lines if text in line), "")


def sigterm_runs(real_url: str, proxy: TcpProxy, *, freeze: float) -> dict[str, Any]:
    """Phase 2: runbot processes behind `proxy`: SIGTERM while frozen, and after recovery."""
    from tomori.domain.models import ShortTermMemoryRecord

    url = proxied_url(real_url, proxy)
    results: dict[str, Any] = {}
    bot = Bot(url)
    bot.wait_for("bot ready")
    time.sleep(3)  # a benchmark's load, not a test: let memory fill
    proxy.freeze()
    bot.wait_for("a call has had no answer")
    code, seconds = bot.terminate()
    proxy.forward()
    results["frozen"] = {
        "exit_code": code,
        "exit_s": round(seconds, 2),
        "line": bot.line("not stored at shutdown"),
    }
    ShortTermMemoryRecord.objects.all().delete()
    bot = Bot(url)
    bot.wait_for("bot ready")
    time.sleep(3)
    proxy.freeze()
    time.sleep(freeze)
    proxy.forward()
    bot.wait_for("the table took the kept durable writes")
    code, seconds = bot.terminate()
    line = bot.line("every durable write is stored")
    found = re.search(r"\((\d+) keys holding (\d+) turns", line)
    memory = (int(found.group(1)), int(found.group(2))) if found else (-1, -1)
    stored = list(ShortTermMemoryRecord.objects.values_list("turn_count", flat=True))
    results["recovered"] = {
        "exit_code": code,
        "exit_s": round(seconds, 2),
        "memory_keys_turns": memory,
        "table_keys_turns": (len(stored), sum(stored)),
        "line": line or bot.line("not stored at shutdown"),
    }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--freeze", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    real_url = os.environ["DATABASE_URL"]
    proxy = _proxy_for(real_url)
    os.environ["DATABASE_URL"] = proxied_url(real_url, proxy)
    import django

    django.setup()
    # Each failed turn logs a traceback; the figures are what this prints.
    logging.getLogger().setLevel(logging.CRITICAL)
    from pipeline import ensure_database  # benchmarks/pipeline.py

    ensure_database("small")
    from tomori.domain.knobs import knobs

    current = knobs()
    print(
        "knobs:",
        {
            "DB_CALL_TIMEOUT_SECONDS": current.DB_CALL_TIMEOUT_SECONDS,
            "DB_BREAKER_OPEN_SECONDS": current.DB_BREAKER_OPEN_SECONDS,
        },
    )
    print(
        f"phase 1: in-process pipeline, {args.rate:g} msg/s, {args.freeze:g} s freeze"
    )
    lat = asyncio.run(turn_latency(proxy, freeze=args.freeze, rate=args.rate))
    print(f"  turns during freeze: {lat['turns_during_freeze']}")
    print(f"  latency p50 {lat['p50_s']} s, p99 {lat['p99_s']} s, max {lat['max_s']} s")
    print(f"  pipeline counters: {lat['pipeline']}")
    print(f"  STM keys {lat['stm_keys']}, behind after flush: {lat['stm_keys_behind']}")
    print("phase 2: runbot subprocesses (default knobs)")
    runs = sigterm_runs(real_url, _proxy_for(real_url), freeze=args.freeze)
    for name, run in runs.items():
        print(f"  {name}: {run}")
    frozen, recovered = runs["frozen"], runs["recovered"]
    checks = {
        f"freeze p99 <= {P99_BAR_S:g} s": lat["p99_s"] <= P99_BAR_S,
        f"SIGTERM while frozen exits <= {EXIT_BAR_S:g} s": frozen["exit_s"]
        <= EXIT_BAR_S,
        "0 STM keys behind (in-process)": lat["stm_keys_behind"] == 0,
        "0 STM keys behind after recovery (runbot)": recovered["exit_code"] == 0
        and recovered["memory_keys_turns"] == recovered["table_keys_turns"],
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
