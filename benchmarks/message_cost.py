"""What a message costs a deployment: the real worker beside a bare discord.py client.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/message_cost.py [--rate 150] [--scenario production]

Two simulated Discords of the same scenario, each in its own process
(`python -m tomori.bot.simulator --scenario S --traffic R`: the same seeded
stream of messages at the same rate), feed at the same time:
- the real worker, `manage.py runbot --simulate --simulator-url ...` with
  production settings (DEBUG off, PostgreSQL, a Redis of its own, the fake
  OpenRouter, every timer, the metrics endpoint), its database reached
  through a proxy that counts its PostgreSQL round trips
  (benchmarks/pg_round_trips.py);
- the floor, benchmarks/bare_client.py: an unmodified discord.Client with
  the worker's own intents, member cache flags and message cache, whose
  on_message only counts.
Both run through the same wall-clock window, after a warm-up from gateway
ready: each process's CPU (user + system, every thread: psutil) over the
window, divided by the messages its on_message received in it. The worker's
CPU is split by thread (its `tomori_thread_cpu_seconds_total`), and its round
trips by kind. The simulators, Redis and PostgreSQL are other processes and
count in neither.

Bars (PASS/FAIL, exit 1 on a FAIL): worker CPU per message <= 2.0x the bare
client's; database round trips per message <= 0.2 (reads, writes and their
transactions together); the worker kept up (backlog at the end <= 1 s of
traffic) and shed nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
from pg_round_trips import KINDS, RoundTripProxy
from processes import (
    ROOT,
    STOP_TIMEOUT_SECONDS,
    Counts,
    base_env,
    by_cache,
    free_port,
    load_average,
    prepare_database,
    process,
    redis_argv,
    scrape,
    wait_for_port,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/tomori_bench"
READY_TIMEOUT_SECONDS = 300.0
CPU_RATIO_BAR = 2.0
ROUND_TRIPS_BAR = 0.2
QUANTILES = (0.5, 0.99)


@dataclass
class Reading:
    """One edge of the window: both processes' CPU and counters."""

    at: float
    worker_cpu: float
    bare_cpu: float
    bare_messages: int
    metrics: dict[str, Any]
    round_trips: dict[str, int]

    @property
    def counts(self) -> Counts:
        """Return the worker's pipeline counters."""
        return Counts.read(self.metrics)


@dataclass
class Window:
    """What the window measured: the readings at its two edges and the set-up."""

    start: Reading
    end: Reading
    commands: dict[str, list[str]] = field(default_factory=dict)
    load: tuple[str, str] = ("", "")

    def series(self, name: str) -> dict[str, float]:
        """Return {label value: delta over the window} of a one-label counter."""
        before = _one_label(self.start.metrics, name)
        after = _one_label(self.end.metrics, name)
        return {key: value - before.get(key, 0.0) for key, value in after.items()}


def _one_label(metrics: dict[str, Any], name: str) -> dict[str, float]:
    return {
        (dict(labels) and next(iter(dict(labels).values())) or ""): value
        for labels, value in metrics.get(name, {}).items()
    }


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _bare_count(port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/count"
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.loads(response.read()))


def _read(
    worker: psutil.Process,
    bare: psutil.Process,
    metrics_port: int,
    bare_port: int,
    proxy: RoundTripProxy,
) -> Reading:
    # Counters first, then CPU: one scrape of each falls inside the window.
    metrics = scrape(metrics_port)
    bare_messages = int(_bare_count(bare_port)["messages"])
    round_trips = proxy.counts()
    return Reading(
        at=time.monotonic(),
        worker_cpu=_cpu(worker),
        bare_cpu=_cpu(bare),
        bare_messages=bare_messages,
        metrics=metrics,
        round_trips=round_trips,
    )


def forget_short_term_memory(url: str) -> None:
    """Empty the short_term_memory table: every run starts as a new deployment does.

    The stream is seeded, so a table a previous run filled holds the very
    keys this run meets: each first miss would then be a restart's
    hydration, not a steady state's (--keep-memory measures that instead).
    """
    import psycopg

    parts = urlsplit(url)
    dsn = (
        f"host={parts.hostname or '127.0.0.1'} port={parts.port or 5432} "
        f"user={parts.username or 'postgres'} dbname={parts.path.lstrip('/')}"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE short_term_memory")


@contextmanager
def profiled(pid: int, options: argparse.Namespace) -> Iterator[None]:
    """Sample every thread of the worker with py-spy over the window (--profile)."""
    if not options.profile:
        yield
        return
    argv = [
        *("py-spy", "record", "--threads", "--pid", str(pid)),
        *("--rate", "250", "--format", "raw", "--output", options.profile),
        *("--duration", str(int(options.window))),
    ]
    with process(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as spy:
        yield
        spy.wait(30)  # it writes its samples when its --duration is over


def proxied_url(url: str, port: int) -> str:
    """Return `url` with its host and port replaced by the proxy's, without TLS."""
    parts = urlsplit(url)
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{port}"
    query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def _wait_ready(
    worker: subprocess.Popen[str], metrics_port: int, bare_port: int, log: str
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"runbot exited with {worker.returncode}: see {log}")
        with open(log) as text:
            worker_ready = "bot ready" in text.read()
        try:
            bare = _bare_count(bare_port)
        except OSError:
            bare = {"ready": False, "messages": 0}
        if (
            worker_ready
            and Counts.read(scrape(metrics_port)).received > 0
            and bare["ready"]
            and bare["messages"] > 0
        ):
            return
        time.sleep(0.5)
    raise RuntimeError(f"not ready within {READY_TIMEOUT_SECONDS:.0f} s: see {log}")


def run(options: argparse.Namespace) -> Window:
    """Start everything, warm up, measure the window, stop everything."""
    env = base_env(options.database_url)
    if not options.skip_seed:
        prepare_database(env, options.scenario)
    if not options.keep_memory:
        forget_short_term_memory(options.database_url)
    ports = {
        name: free_port()
        for name in ("redis", "metrics", "openrouter", "sim", "bare_sim", "bare", "pg")
    }
    db = urlsplit(options.database_url)
    proxy = RoundTripProxy(db.hostname or "127.0.0.1", db.port or 5432, ports["pg"])
    env |= {
        "DATABASE_URL": proxied_url(options.database_url, ports["pg"]),
        "REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
        "METRICS_PORT": str(ports["metrics"]),
        "OPENROUTER_BASE_URL": f"http://127.0.0.1:{ports['openrouter']}/api/v1",
    }
    traffic = ["--scenario", options.scenario, "--traffic", str(options.rate)]
    sim = [sys.executable, "-m", "tomori.bot.simulator", *traffic]
    commands = {
        "worker": [
            *("python", "manage.py", "runbot", "--simulate"),
            *("--simulator-url", f"http://127.0.0.1:{ports['sim']}"),
        ],
        "bare client": [
            *("python", "benchmarks/bare_client.py"),
            *("--simulator-url", f"http://127.0.0.1:{ports['bare_sim']}"),
            *("--port", str(ports["bare"])),
        ],
        "simulated Discords (two, one each)": ["python", *sim[1:]],
    }
    log_path = options.log
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proxy.start()
    try:
        with (
            open(log_path, "w") as log,
            process(redis_argv(ports["redis"]), **quiet),
            process(
                [sys.executable, "-m", "caches.catalogs.fake_server"]
                + ["--port", str(ports["openrouter"])],
                env=env,
                **quiet,
            ),
            process([*sim, "--port", str(ports["sim"])], env=env, **quiet),
            process([*sim, "--port", str(ports["bare_sim"])], env=env, **quiet),
        ):
            for name in ("redis", "openrouter", "sim", "bare_sim"):
                wait_for_port(ports[name], timeout=READY_TIMEOUT_SECONDS)
            with (
                process(
                    [sys.executable, *commands["worker"][1:]],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ) as worker,
                process(
                    [sys.executable, *commands["bare client"][1:]], env=env, **quiet
                ) as bare,
            ):
                _wait_ready(worker, ports["metrics"], ports["bare"], log_path)
                print(f"both ready; warming up {options.warmup:g} s", flush=True)
                time.sleep(options.warmup)
                procs = (psutil.Process(worker.pid), psutil.Process(bare.pid))
                edge = (ports["metrics"], ports["bare"], proxy)
                load_start = load_average()
                start = _read(*procs, *edge)
                print(f"measuring {options.window:g} s", flush=True)
                with profiled(worker.pid, options):
                    time.sleep(options.window)
                end = _read(*procs, *edge)
                window = Window(start, end, commands, (load_start, load_average()))
                worker.send_signal(signal.SIGTERM)
                worker.wait(STOP_TIMEOUT_SECONDS)
    finally:
        proxy.stop()
    return window


# ------------------------------------------------------------------ report


def quantile(window: Window, q: float) -> float | None:
    """Return the q-quantile of turn time over the window (bucket upper bound)."""
    name = "tomori_turn_duration_seconds_bucket"
    buckets: dict[float, float] = {}
    for reading, sign in ((window.end, 1), (window.start, -1)):
        for labels, value in reading.metrics.get(name, {}).items():
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + sign * value
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    wanted = q * buckets[bounds[-1]]
    return next(le for le in bounds if buckets[le] >= wanted)


def report(window: Window, options: argparse.Namespace) -> bool:
    """Print the figures side by side; return whether every bar passed."""
    start, end = window.start, window.end
    seconds = end.at - start.at
    # The stream's messages: the worker also receives its own replies (the
    # bare client sends none), which it skips; they are not the stream's.
    own = window.series("tomori_messages_skipped_total").get("own", 0.0)
    worker_messages = end.counts.received - start.counts.received - int(own)
    bare_messages = end.bare_messages - start.bare_messages
    worker_ms = (end.worker_cpu - start.worker_cpu) * 1000 / max(worker_messages, 1)
    bare_ms = (end.bare_cpu - start.bare_cpu) * 1000 / max(bare_messages, 1)
    ratio = worker_ms / bare_ms if bare_ms else float("inf")
    print("\n== what a message costs: the worker beside a bare discord.py client ==")
    for name, argv in window.commands.items():
        print(f"{name}: {' '.join(argv)}")
    print(
        f"load: scenario {options.scenario}, {options.rate:g} msg/s each, warm-up "
        f"{options.warmup:g} s after ready, window {seconds:.1f} s, short-term "
        f"memory table {'kept' if options.keep_memory else 'emptied first'}; load average "
        f"{window.load[0]} at the start, {window.load[1]} at the end"
    )
    print(f"\n{'':<28}{'worker':>12}{'bare client':>14}")
    print(f"{'messages in the window':<28}{worker_messages:>12,}{bare_messages:>14,}")
    print(f"(the worker also received {int(own):,} of its own replies, not counted)")
    print(f"{'CPU per message (ms)':<28}{worker_ms:>12.3f}{bare_ms:>14.3f}")
    print(f"worker / bare client: {ratio:.2f}x")
    trips = {k: end.round_trips[k] - start.round_trips[k] for k in KINDS}
    per = {k: v / max(worker_messages, 1) for k, v in trips.items()}
    trips_per_message = sum(per.values())
    print(
        f"\ndatabase round trips per message: {trips_per_message:.3f} ("
        + ", ".join(f"{k} {per[k]:.3f}" for k in KINDS)
        + f"; {sum(trips.values()):,} in the window)"
    )
    _threads(window, worker_messages)
    gc_runs = window.series("python_gc_collections_total")
    print(
        "cyclic GC collections in the window (generation 0/1/2): "
        + "/".join(f"{int(gc_runs.get(str(g), 0)):,}" for g in range(3))
    )
    _caches(window, worker_messages)
    turns = [quantile(window, q) for q in QUANTILES]
    backlog = end.counts.received - end.counts.processed
    shed = end.counts.shed - start.counts.shed
    print(
        "turn time over the window: "
        + ", ".join(
            f"p{q * 100:g} <= {t * 1000:g} ms" if t is not None else f"p{q * 100:g} -"
            for q, t in zip(QUANTILES, turns, strict=True)
        )
        + f"; backlog at the end {backlog:,}; shed in the window {shed:,}"
    )
    bars = [
        (f"worker CPU per message <= {CPU_RATIO_BAR:g}x the bare client's", ratio <= CPU_RATIO_BAR, f"{ratio:.2f}x"),
        (f"database round trips per message <= {ROUND_TRIPS_BAR:g}", trips_per_message <= ROUND_TRIPS_BAR, f"{trips_per_message:.3f}"),
        ("the worker kept up (backlog <= 1 s of traffic)", backlog <= options.rate, f"{backlog:,}"),
        ("nothing shed", shed == 0, f"{shed:,}"),
    ]  # fmt: skip
    print()
    for label, passed, figure in bars:
        print(f"{'PASS' if passed else 'FAIL'}  {label}: {figure}")
    return all(passed for _, passed, _ in bars)


def _threads(window: Window, messages: int) -> None:
    threads = window.series("tomori_thread_cpu_seconds_total")
    process_seconds = window.end.worker_cpu - window.start.worker_cpu
    rest = process_seconds - sum(threads.values())
    print("\nworker CPU by thread (ms per message, share of the process):")
    rows = sorted(threads.items(), key=lambda item: -item[1])
    for name, seconds in [*rows, ("(threads Python did not start)", rest)]:
        if seconds * 1000 / max(messages, 1) < 0.0005:
            continue
        share = seconds / process_seconds if process_seconds else 0.0
        print(f"  {name:<36}{seconds * 1000 / max(messages, 1):>8.3f}{share:>8.1%}")


def _caches(window: Window, messages: int) -> None:
    hits = window.series("tomori_cache_hits_total")
    misses = window.series("tomori_cache_misses_total")
    loads = window.series("tomori_cache_loads_total")
    lookups = sum(hits.values()) + sum(misses.values())
    rate = sum(hits.values()) / lookups if lookups else 0.0
    print(
        f"\ncache hit rate over the window: {rate:.1%} ({lookups / max(messages, 1):.1f}"
        " lookups per message); misses and loads per message, by cache:"
    )
    rows = sorted(misses, key=lambda name: -misses[name])
    for name in rows:
        if misses[name] <= 0:
            continue
        per_miss = misses[name] / max(messages, 1)
        per_load = loads.get(name, 0.0) / max(messages, 1)
        print(f"  {name:<28}{per_miss:>8.3f} misses{per_load:>8.3f} loads")
    entries = by_cache(window.end.metrics, "tomori_cache_entries")
    print(
        "  entries at the end:",
        json.dumps({k: int(v) for k, v in entries.items() if v}),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=150.0, help="messages/s each")
    parser.add_argument("--scenario", default="production")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds")
    parser.add_argument("--window", type=float, default=60.0, help="seconds")
    parser.add_argument("--skip-seed", action="store_true")
    parser.add_argument(
        "--keep-memory",
        action="store_true",
        help="keep the short_term_memory rows of earlier runs (a restart's "
        "hydration, not a new deployment)",
    )
    parser.add_argument("--log", default="/tmp/message_cost.log", help="worker output")
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="diagnosis: py-spy's raw samples of the worker's threads over the "
        "window (py-spy on PATH; its sampling costs CPU: not a figure)",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
    )
    return parser.parse_args(argv)


def main() -> int:
    """Run the benchmark; exit 1 on a FAIL."""
    options = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    os.chdir(ROOT)
    return 0 if report(run(options), options) else 1


if __name__ == "__main__":
    sys.exit(main())
