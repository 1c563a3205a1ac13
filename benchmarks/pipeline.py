"""Benchmark the message pipeline: warm caches vs. uncached, old main vs. this build, memory.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/pipeline.py [--quick] [--scenario production]

Phase 1, turns (see benchmarks/pipeline_turns.py): the real discord.py client
connects to an in-process simulated Discord to load the scenario's guilds,
then each message is a simulator MESSAGE_CREATE payload handed to
discord.py's own `parse_message_create` (what the gateway does, minus the
websocket and JSON), whose on_message runs the real pipeline.
- In this process, rounds of: a genuine first pass (caches cleared and
  re-warmed as at worker start, then messages of (server, user, channel)
  tuples never sent before), the same stream warm, one OK message repeated,
  and the every-cache-cleared variant (each cache, short-term memory and the
  LLM cache included, cleared before every message); medians reported.
- Warm handle() of this build against the old main (--base-root, a checkout
  imported instead of this tree, with its own database), one child process
  each, rounds alternated; then this build's rounds alternated on a quiet
  machine and beside a CPU-bound neighbour process.
Database statements are counted on every thread's connection; short-term
memory's write-behind upserts (queued, off the message path, on in every
phase, to PostgreSQL) are counted apart from the message path's own queries.

Phase 2, memory (a child process, so the RSS is a bot worker's alone): the
simulator runs in a grandchild process and the real TomoriClient connects to
it over loopback; the child asks for traffic in batches of --batch (50), at
most two in flight, since discord.py has no backpressure (a flood would queue
unboundedly many handler tasks, which no production gateway sends: the
scenario's rate is 50 messages/s). It samples RSS as messages are processed,
with discord.py's sweepers scheduled as in the worker.

Bars (PASS/FAIL): warm path 0 database queries per message for a repeat
(server, user, channel); warm throughput >= 20x the genuine first pass; warm
handle() mean <= 50 us where the old main measures 91.5 us (this build's mean
rescaled by its ratio to the old main's in the same run, the larger of the
pooled and median-round ratios; the absolute mean is printed, judged only
when no old build runs); warm p99 <= 1 ms with the write-behind on, quiet and
beside the neighbour; RSS <= 200 MB with every cache warm, and flat within 5%
from the 100,000th to the 1,000,000th message (a --quick run judges neither
memory bar: its caches are still filling). Exits 1 on a FAIL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASE_ROOT = Path("/work/wt/base")  # --base-root: a checkout of the old main


def _code_root() -> Path:
    """Return the tree whose project code this process imports (--code-root)."""
    if "--code-root" in sys.argv:  # a round child of the old-vs-new comparison
        return Path(sys.argv[sys.argv.index("--code-root") + 1]).resolve()
    return ROOT


sys.path.insert(0, str(_code_root()))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # pipeline_turns

import pipeline_turns as turns  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tomori_bench")
# The benchmark must not publish invalidations to workers on the shared Redis.
os.environ["REDIS_URL"] = ""

RSS_BAR_MB = 200.0
FLAT_BAR = 0.05
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
    run = results["run"]
    print("\n== run ==")
    print("command:", run["command"])
    print(f"scenario: {run['scenario']}; builds: {run['builds']}")
    print("load average (1, 5, 15 min):", run["load"])
    bars: list[Bar] = turns.turns_report(results["turns"])
    if "children" in results:
        bars += turns.builds_report(
            results["children"], old_commit=results["old_commit"]
        )
    m = results.get("memory")
    if m is not None:
        bars += _memory_report(m, flat_from)
    print("\n== bars ==")
    for label, passed, figure in bars:
        verdict = "INFO" if passed is None else "PASS" if passed else "FAIL"
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
    parser.add_argument("--quick", action="store_true", help="under a minute")
    parser.add_argument("--scenario", default="production")
    parser.add_argument("--warm-messages", type=int, default=None, help="per round")
    parser.add_argument("--uncached-messages", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None, help="in-process rounds")
    parser.add_argument("--build-rounds", type=int, default=None, help="per build")
    parser.add_argument("--neighbour-rounds", type=int, default=None)
    parser.add_argument("--base-root", type=Path, default=BASE_ROOT)
    parser.add_argument("--skip-base", action="store_true", help="no old build")
    parser.add_argument("--memory-messages", type=int, default=None)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--serve-simulator", action="store_true", help=argparse.SUPPRESS
    )
    parser.add_argument("--serve-rounds", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stream", type=int, default=300, help=argparse.SUPPRESS)
    return parser.parse_args()


def _commit(root: Path) -> str:
    """Return `root`'s HEAD commit (short), marked + when its tree has changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def run_turns(options: argparse.Namespace) -> dict[str, Any]:
    """Phase 1: the in-process rounds, then the child processes' rounds."""
    quick = options.quick
    stream = options.warm_messages or (150 if quick else 1_000)
    cleared = options.uncached_messages or (30 if quick else 300)
    results: dict[str, Any] = {
        "turns": asyncio.run(
            turns.in_process_rounds(
                options.scenario,
                rounds=options.rounds or (3 if quick else 5),
                stream=stream,
                cleared=cleared,
            )
        )
    }
    roots = {"new": ROOT}
    if not options.skip_base and options.base_root.is_dir():
        roots = {"old": options.base_root.resolve(), "new": ROOT}
    elif not options.skip_base:
        print(
            f"no old build at {options.base_root} (--base-root): the mean bar is "
            "judged absolute",
            file=sys.stderr,
        )
    commits = {label: _commit(root) for label, root in roots.items()}
    results["old_commit"] = commits.get("old", "")
    results["builds"] = {
        label: f"{root} ({commits[label]})" for label, root in roots.items()
    }
    results["children"] = turns.child_rounds(
        Path(__file__).resolve(),
        roots=roots,
        scenario=options.scenario,
        stream=stream,
        rounds=options.build_rounds or (4 if quick else 10),
        neighbour_rounds=options.neighbour_rounds or (2 if quick else 6),
    )
    return results


def main() -> int:
    """Run the benchmark (or one of its child roles)."""
    options = parse_args()
    if options.serve_simulator:
        asyncio.run(serve_simulator(options.scenario))
        return 0
    _setup_django()
    import logging

    logging.basicConfig(level=logging.ERROR)
    if options.serve_rounds:
        print("seed:", ensure_database(options.scenario), file=sys.stderr)
        asyncio.run(turns.serve_rounds(options.scenario, options.stream))
        return 0
    memory_total = options.memory_messages or (1_000 if options.quick else 1_000_000)
    if options.memory_run:
        result = asyncio.run(memory_run(options.scenario, memory_total, options.batch))
        print(json.dumps(result))
        return 0
    load = [os.getloadavg()]
    print("seed:", ensure_database(options.scenario))
    results = run_turns(options)
    load.append(os.getloadavg())
    if not options.skip_memory:
        results["memory"] = run_memory_child(
            options.scenario, memory_total, options.batch
        )
        load.append(os.getloadavg())
    results["run"] = {
        "command": f"DATABASE_URL={shlex.quote(os.environ['DATABASE_URL'])} "
        + shlex.join([sys.executable, *sys.argv]),
        "scenario": options.scenario,
        "builds": results.pop("builds"),
        "load": " -> ".join(" ".join(f"{x:.2f}" for x in avg) for avg in load),
    }
    flat_from = None if options.quick else min(100_000, memory_total // 10)
    return 0 if report(results, flat_from=flat_from) else 1


if __name__ == "__main__":
    sys.exit(main())
