"""What a message costs a deployment: the real worker beside a bare discord.py client.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/message_cost.py [--rate 150] [--scenario production] \\
     [--base-tree DIR]

Simulated Discords of the same scenario, each in its own process
(`python -m tomori.bot.simulator --scenario S --traffic R`: the same seeded
stream of messages at the same rate), feed at the same time:
- the real worker, `manage.py runbot --simulate --simulator-url ...` with
  production settings (DEBUG off, PostgreSQL, Redis, the fake OpenRouter,
  every timer, the metrics endpoint), its database reached through a proxy
  that counts its PostgreSQL round trips (benchmarks/pg_round_trips.py);
- with --base-tree DIR, the worker of another checkout (the previous main,
  say) the same way, on a database of its own (--base-database-url, seeded
  by its own migrations and seed_demo): before and after in one window;
- the floor, benchmarks/bare_client.py: an unmodified discord.Client with
  the worker's own intents, member cache flags and message cache, whose
  on_message only counts.
All run through the same wall-clock window, after a warm-up from gateway
ready: each process's CPU (user + system, every thread: psutil) over the
window, divided by the stream's messages its on_message received in it (a
worker also receives its own replies, which it skips: not counted). A worker
that exports `tomori_thread_cpu_seconds_total` is split by thread; round
trips are split by kind. The simulators, Redis and PostgreSQL are other
processes and count in none. The CPU one process spends on the same work
moves by up to 1.6x between runs minutes apart on these 2-core VMs: read the
ratios of one run, not figures of different runs.

Bars (PASS/FAIL, exit 1 on a FAIL), for this tree's worker: CPU per message
<= 2.0x the bare client's; database round trips per message <= 0.2 (reads,
writes and their transactions together); it kept up (backlog at the end
<= 1 s of traffic) and shed nothing.
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
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
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
    turn_quantile,
    wait_for_port,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/tomori_bench"
READY_TIMEOUT_SECONDS = 300.0
CPU_RATIO_BAR = 2.0
ROUND_TRIPS_BAR = 0.2
QUANTILES = (0.5, 0.99)
QUIET = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


@dataclass
class Side:
    """One worker under measure: its checkout, database, ports and readings."""

    name: str
    tree: Path
    database_url: str
    redis_db: int
    log: str
    ports: dict[str, int] = field(default_factory=dict)
    proxy: RoundTripProxy | None = None
    command: list[str] = field(default_factory=list)
    pid: int = 0
    start: dict[str, Any] = field(default_factory=dict)
    end: dict[str, Any] = field(default_factory=dict)

    def series(self, name: str) -> dict[str, float]:
        """Return {label value: delta over the window} of a one-label counter."""
        before = _one_label(self.start["metrics"], name)
        after = _one_label(self.end["metrics"], name)
        return {key: value - before.get(key, 0.0) for key, value in after.items()}

    @property
    def messages(self) -> int:
        """Return the stream's messages received in the window (own replies apart)."""
        own = self.series("tomori_messages_skipped_total").get("own", 0.0)
        received = Counts.read(self.end["metrics"]).received
        return received - Counts.read(self.start["metrics"]).received - int(own)

    @property
    def cpu(self) -> float:
        """Return the process's CPU seconds over the window."""
        return float(self.end["cpu"] - self.start["cpu"])

    def cpu_ms(self) -> float:
        """Return CPU milliseconds per message of the stream."""
        return self.cpu * 1000 / max(self.messages, 1)


def _one_label(metrics: dict[str, Any], name: str) -> dict[str, float]:
    return {
        (dict(labels) and next(iter(dict(labels).values())) or ""): value
        for labels, value in metrics.get(name, {}).items()
    }


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _bare_count(port: int) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/count"
    with urllib.request.urlopen(url, timeout=10) as response:
        return dict(json.loads(response.read()))


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


def proxied_url(url: str, port: int) -> str:
    """Return `url` with its host and port replaced by the proxy's, without TLS."""
    parts = urlsplit(url)
    netloc = f"{parts.username or 'postgres'}@127.0.0.1:{port}"
    query = "&".join(q for q in (parts.query, "sslmode=disable") if q)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@contextmanager
def profiled(pid: int, options: argparse.Namespace) -> Iterator[None]:
    """Sample the worker's GIL holder with py-spy over the window (--profile).

    `--gil`: a sample only of the thread running Python, so the samples
    split the process's Python CPU by thread and function (a thread waiting
    for the GIL, or in `epoll`, is not counted as busy). `--nonblocking`:
    the worker is not paused for each sample (blocking sampling inflated
    every thread's figures).
    """
    if not options.profile:
        yield
        return
    argv = [
        *("py-spy", "record", "--threads", "--gil", "--nonblocking"),
        *("--pid", str(pid), "--rate", "1000"),
        *("--format", "raw", "--output", options.profile),
        *("--duration", str(int(options.window))),
    ]
    with process(argv, **QUIET) as spy:
        yield
        spy.wait(30)  # it writes its samples when its --duration is over


# ------------------------------------------------------------------ the run


def sides_of(options: argparse.Namespace) -> list[Side]:
    """Return this tree's worker, and the base tree's when asked for."""
    sides = [Side("worker", ROOT, options.database_url, 0, options.log)]
    if options.base_tree:
        base_url = options.base_database_url or f"{options.database_url}_base"
        log = f"{Path(options.log).with_suffix('')}-base.log"
        sides.append(Side("base", Path(options.base_tree), base_url, 1, log))
    return sides


def prepare(side: Side, options: argparse.Namespace) -> None:
    """Seed the side's database with its own tree's migrations; empty its memory."""
    if not options.skip_seed:
        prepare_database(base_env(side.database_url), options.scenario, root=side.tree)
    if not options.keep_memory:
        forget_short_term_memory(side.database_url)


def start_worker(
    side: Side, options: argparse.Namespace, stack: ExitStack, shared: dict[str, int]
) -> subprocess.Popen[str]:
    """Start the side's proxy, simulated Discord and worker; return the worker."""
    side.ports = {name: free_port() for name in ("pg", "sim", "metrics")}
    db = urlsplit(side.database_url)
    side.proxy = RoundTripProxy(
        db.hostname or "127.0.0.1", db.port or 5432, side.ports["pg"]
    ).start()
    stack.callback(side.proxy.stop)
    env = base_env(proxied_url(side.database_url, side.ports["pg"])) | {
        "REDIS_URL": f"redis://127.0.0.1:{shared['redis']}/{side.redis_db}",
        "METRICS_PORT": str(side.ports["metrics"]),
        "OPENROUTER_BASE_URL": f"http://127.0.0.1:{shared['openrouter']}/api/v1",
    }
    stack.enter_context(
        process([*simulator_argv(options), "--port", str(side.ports["sim"])], **QUIET)
    )
    wait_for_port(side.ports["sim"], timeout=READY_TIMEOUT_SECONDS)
    manage = side.tree / "manage.py"  # its own directory first on sys.path
    side.command = [
        *("python", str(manage), "runbot", "--simulate"),
        *("--simulator-url", f"http://127.0.0.1:{side.ports['sim']}"),
    ]
    log = stack.enter_context(open(side.log, "w"))  # noqa: SIM115
    worker = stack.enter_context(
        process(
            [sys.executable, *side.command[1:]],
            cwd=side.tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    side.pid = worker.pid
    return worker


def simulator_argv(options: argparse.Namespace) -> list[str]:
    """Return the argv of one simulated Discord sending the scenario's stream."""
    return [
        *(sys.executable, "-m", "tomori.bot.simulator"),
        *("--scenario", options.scenario, "--traffic", str(options.rate)),
    ]


def _worker_ready(side: Side, worker: subprocess.Popen[str]) -> bool:
    if worker.poll() is not None:
        raise RuntimeError(
            f"{side.name} exited with {worker.returncode}: see {side.log}"
        )
    with open(side.log) as text:
        if "bot ready" not in text.read():
            return False
    return Counts.read(scrape(side.ports["metrics"])).received > 0


def _bare_ready(port: int) -> bool:
    try:
        count = _bare_count(port)
    except OSError:
        return False
    return bool(count["ready"]) and count["messages"] > 0


def wait_ready(
    workers: list[tuple[Side, subprocess.Popen[str]]], bare_port: int
) -> None:
    """Return once every worker and the bare client have received messages."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if all(_worker_ready(s, w) for s, w in workers) and _bare_ready(bare_port):
            return
        time.sleep(0.5)
    raise RuntimeError(f"not ready within {READY_TIMEOUT_SECONDS:.0f} s")


def read_edge(sides: list[Side], bare: dict[str, Any], which: str) -> None:
    """Read every process's counters, then its CPU (one scrape falls in the window)."""
    for side in sides:
        assert side.proxy is not None
        reading = {
            "metrics": scrape(side.ports["metrics"]),
            "round_trips": side.proxy.counts(),
            "by_table": side.proxy.by_table(),
        }
        reading["cpu"] = _cpu(side.pid)
        setattr(side, which, reading)
    bare[which] = {"messages": int(_bare_count(bare["port"])["messages"])}
    bare[which]["cpu"] = _cpu(bare["pid"])
    bare[which]["at"] = time.monotonic()


def run(options: argparse.Namespace) -> tuple[list[Side], dict[str, Any]]:
    """Start everything, warm up, measure the window, stop everything."""
    sides = sides_of(options)
    for side in sides:
        prepare(side, options)
    shared = {name: free_port() for name in ("redis", "openrouter", "bare_sim", "bare")}
    bare: dict[str, Any] = {"port": shared["bare"]}
    with ExitStack() as stack:
        stack.enter_context(process(redis_argv(shared["redis"]), **QUIET))
        fake = [sys.executable, "-m", "caches.catalogs.fake_server"]
        stack.enter_context(
            process([*fake, "--port", str(shared["openrouter"])], **QUIET)
        )
        for name in ("redis", "openrouter"):
            wait_for_port(shared[name])
        workers = [(side, start_worker(side, options, stack, shared)) for side in sides]
        sim = [*simulator_argv(options), "--port", str(shared["bare_sim"])]
        stack.enter_context(process(sim, **QUIET))
        wait_for_port(shared["bare_sim"], timeout=READY_TIMEOUT_SECONDS)
        bare["command"] = [
            *("python", "benchmarks/bare_client.py"),
            *("--simulator-url", f"http://127.0.0.1:{shared['bare_sim']}"),
            *("--port", str(shared["bare"])),
        ]
        env = base_env(options.database_url)
        proc = stack.enter_context(
            process([sys.executable, *bare["command"][1:]], env=env, **QUIET)
        )
        bare["pid"] = proc.pid
        wait_ready(workers, shared["bare"])
        print(f"all ready; warming up {options.warmup:g} s", flush=True)
        time.sleep(options.warmup)
        bare["load"] = [load_average()]
        read_edge(sides, bare, "start")
        print(f"measuring {options.window:g} s", flush=True)
        with profiled(sides[0].pid, options):
            time.sleep(options.window)
        read_edge(sides, bare, "end")
        bare["load"].append(load_average())
        for _, worker in workers:
            worker.send_signal(signal.SIGTERM)
        for _, worker in workers:
            worker.wait(STOP_TIMEOUT_SECONDS)
    return sides, bare


# ------------------------------------------------------------------ report


def quantile(side: Side, q: float) -> float | None:
    """Return the q-quantile of turn time over the window (bucket upper bound)."""
    return turn_quantile(side.start["metrics"], side.end["metrics"], q)


def report(
    sides: list[Side], bare: dict[str, Any], options: argparse.Namespace
) -> bool:
    """Print the figures side by side; return whether every bar passed."""
    seconds = bare["end"]["at"] - bare["start"]["at"]
    bare_messages = bare["end"]["messages"] - bare["start"]["messages"]
    bare_ms = (bare["end"]["cpu"] - bare["start"]["cpu"]) * 1000 / max(bare_messages, 1)
    print("\n== what a message costs: the worker beside a bare discord.py client ==")
    for side in sides:
        print(f"{side.name} ({side.tree}): {' '.join(side.command)}")
    print(f"bare client: {' '.join(bare['command'])}")
    print(f"simulated Discords (one each): {' '.join(simulator_argv(options)[1:])}")
    print(
        f"load: scenario {options.scenario}, {options.rate:g} msg/s each, warm-up "
        f"{options.warmup:g} s after ready, window {seconds:.1f} s, short-term "
        f"memory {'kept' if options.keep_memory else 'emptied first'}; load "
        f"average {bare['load'][0]} at the start, {bare['load'][1]} at the end"
    )
    names = [side.name for side in sides]
    print(f"\n{'':<30}" + "".join(f"{n:>12}" for n in names) + f"{'bare client':>14}")
    row = "".join(f"{side.messages:>12,}" for side in sides)
    print(f"{'messages in the window':<30}{row}{bare_messages:>14,}")
    row = "".join(f"{side.cpu_ms():>12.3f}" for side in sides)
    print(f"{'CPU per message (ms)':<30}{row}{bare_ms:>14.3f}")
    for side in sides:
        print(f"{side.name} / bare client: {side.cpu_ms() / bare_ms:.2f}x")
    if len(sides) > 1:
        print(f"worker / base: {sides[0].cpu_ms() / sides[1].cpu_ms():.2f}x")
    for side in sides:
        _side_report(side)
    return _bars(sides[0], bare_ms, options)


def _round_trips(side: Side) -> tuple[float, dict[str, float]]:
    trips = {
        k: side.end["round_trips"][k] - side.start["round_trips"][k] for k in KINDS
    }
    per = {k: v / max(side.messages, 1) for k, v in trips.items()}
    return sum(per.values()), per


def _by_table(side: Side) -> None:
    """Print the round trips per message by kind and first table named (top 8)."""
    before, after = side.start["by_table"], side.end["by_table"]
    per = {
        label: (n - before.get(label, 0)) / max(side.messages, 1)
        for label, n in after.items()
    }
    top = sorted(((v, k) for k, v in per.items() if v > 0), reverse=True)[:8]
    if top:
        print("  by statement and table: " + ", ".join(f"{k} {v:.3f}" for v, k in top))


def _side_report(side: Side) -> None:
    total, per = _round_trips(side)
    print(f"\n-- {side.name}")
    print(
        f"database round trips per message: {total:.3f} ("
        + ", ".join(f"{k} {per[k]:.3f}" for k in KINDS)
        + ")"
    )
    _by_table(side)
    _threads(side)
    gc_runs = side.series("python_gc_collections_total")
    print(
        "cyclic GC collections in the window (generation 0/1/2): "
        + "/".join(f"{int(gc_runs.get(str(g), 0)):,}" for g in range(3))
    )
    paused = side.series("tomori_gc_pause_seconds_sum")  # absent in older trees
    if paused:
        print(
            "  their pauses in all (ms, generation 0/1/2): "
            + "/".join(f"{paused.get(str(g), 0.0) * 1000:,.1f}" for g in range(3))
        )
    _caches(side)
    counts = Counts.read(side.end["metrics"])
    turns = [quantile(side, q) for q in QUANTILES]
    print(
        "turn time over the window: "
        + ", ".join(
            f"p{q * 100:g} <= {t * 1000:g} ms" if t is not None else f"p{q * 100:g} -"
            for q, t in zip(QUANTILES, turns, strict=True)
        )
        + f"; backlog at the end {counts.received - counts.processed:,}; shed in "
        f"the window {counts.shed - Counts.read(side.start['metrics']).shed:,}"
    )


def _bars(side: Side, bare_ms: float, options: argparse.Namespace) -> bool:
    ratio = side.cpu_ms() / bare_ms if bare_ms else float("inf")
    trips, _ = _round_trips(side)
    counts = Counts.read(side.end["metrics"])
    backlog = counts.received - counts.processed
    shed = counts.shed - Counts.read(side.start["metrics"]).shed
    bars = [
        (f"worker CPU per message <= {CPU_RATIO_BAR:g}x the bare client's", ratio <= CPU_RATIO_BAR, f"{ratio:.2f}x"),
        (f"database round trips per message <= {ROUND_TRIPS_BAR:g}", trips <= ROUND_TRIPS_BAR, f"{trips:.3f}"),
        ("the worker kept up (backlog <= 1 s of traffic)", backlog <= options.rate, f"{backlog:,}"),
        ("nothing shed", shed == 0, f"{shed:,}"),
    ]  # fmt: skip
    print()
    for label, passed, figure in bars:
        print(f"{'PASS' if passed else 'FAIL'}  {label}: {figure}")
    return all(passed for _, passed, _ in bars)


def _threads(side: Side) -> None:
    threads = side.series("tomori_thread_cpu_seconds_total")
    if not threads:
        return  # a build without the per-thread counter
    messages = max(side.messages, 1)
    rest = side.cpu - sum(threads.values())
    print("CPU by thread (ms per message, share of the process):")
    rows = sorted(threads.items(), key=lambda item: -item[1])
    for name, seconds in [*rows, ("(threads Python did not start)", rest)]:
        if seconds * 1000 / messages < 0.0005:
            continue
        share = seconds / side.cpu if side.cpu else 0.0
        print(f"  {name:<36}{seconds * 1000 / messages:>8.3f}{share:>8.1%}")


def _caches(side: Side) -> None:
    hits = side.series("tomori_cache_hits_total")
    misses = side.series("tomori_cache_misses_total")
    loads = side.series("tomori_cache_loads_total")
    messages = max(side.messages, 1)
    lookups = sum(hits.values()) + sum(misses.values())
    rate = sum(hits.values()) / lookups if lookups else 0.0
    print(
        f"cache hit rate over the window: {rate:.1%} ({lookups / messages:.1f}"
        " lookups per message); misses and loads per message, by cache:"
    )
    for name in sorted(misses, key=lambda name: -misses[name]):
        if misses[name] > 0:
            per_load = loads.get(name, 0.0) / messages
            print(
                f"  {name:<28}{misses[name] / messages:>8.3f} misses{per_load:>8.3f} loads"
            )
    entries = by_cache(side.end["metrics"], "tomori_cache_entries")
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
    parser.add_argument(
        "--base-tree",
        metavar="DIR",
        help="also run the worker of this checkout (e.g. `git worktree add "
        "--detach /tmp/oldmain <commit>`) in the same window",
    )
    parser.add_argument(
        "--base-database-url",
        help="the base worker's database (default: --database-url + '_base')",
    )
    parser.add_argument("--log", default="/tmp/message_cost.log", help="worker output")
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="diagnosis: py-spy's raw samples of the thread holding the GIL "
        "over the window, 1,000 a second (py-spy on PATH; its sampling costs "
        "CPU: not a figure)",
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
    return 0 if report(*run(options), options) else 1


if __name__ == "__main__":
    sys.exit(main())
