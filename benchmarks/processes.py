"""What the benchmarks that run real processes share: ports, children, settings, /metrics."""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tomori.devenv (redis_argv)
STOP_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    """Return a loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_average() -> str:
    """Return the 1, 5 and 15 minute load averages and the CPU count."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


# ------------------------------------------------------------------ processes


def add_database_url(parser: argparse.ArgumentParser, default: str) -> None:
    """Add --database-url: DATABASE_URL from the environment, else `default`."""
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL") or default
    )


def exit_on_sigterm() -> None:
    """Make a SIGTERM unwind through the `process` blocks: no child outlives us."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))


def base_env(database_url: str) -> dict[str, str]:
    """Return production settings for every child: no .env, no test settings."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings",
        "TOMORI_ENV_FILE": os.devnull,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "CRYPTO_SECRET_V1": secrets.token_urlsafe(32),
        "CRYPTO_SECRET_CURRENT": "1",
        "DATABASE_URL": database_url,
        "PYTHONUNBUFFERED": "1",
    }


def prepare_database(env: dict[str, str], scenario: str, *, root: Path = ROOT) -> None:
    """Create the database if missing, migrate it and seed the scenario's rows.

    `root` is the checkout whose migrations and seed run (another build's,
    beside this one); a scenario file is named by its absolute path there.
    """
    create_database(env["DATABASE_URL"])
    quiet = {**env, "REDIS_URL": ""}  # nothing listens yet: publish nothing
    if (ROOT / scenario).is_file():
        scenario = str((ROOT / scenario).resolve())
    manage = [sys.executable, "manage.py"]
    for args in (
        ["migrate", "--noinput", "-v0"],
        ["seed_demo", "--scenario", scenario, "--no-user"],
    ):
        subprocess.run([*manage, *args], cwd=root, env=quiet, check=True)


def parent_or_child(
    script: str,
    parser: argparse.ArgumentParser,
    child: Callable[[argparse.Namespace], None],
    *,
    scenario: str | None = None,
) -> None:
    """Run `child(options)` in a child process of `script`, under production settings.

    Adds --database-url (the benchmarks' database) and the child's hidden
    flag to `parser`. In the parent: seeds `scenario` if given, prints the
    command and the load, and runs `script --child` with the same arguments.
    """
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    add_database_url(parser, "postgres://postgres@127.0.0.1:5432/tomori_bench")
    options = parser.parse_args()
    if options.child:
        child(options)
        return
    env = base_env(options.database_url)
    if scenario is not None:
        prepare_database(env, scenario)
    print(f"command: {' '.join(sys.argv)}\nload average: {load_average()}", flush=True)
    subprocess.run(
        [sys.executable, script, "--child", *sys.argv[1:]], env=env, check=True
    )


def create_database(url: str) -> None:
    """Create the PostgreSQL database of `url` unless it exists (SQLite: nothing)."""
    from urllib.parse import urlsplit

    import psycopg

    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return
    name = parts.path.lstrip("/")
    dsn = (
        f"host={parts.hostname or '127.0.0.1'} port={parts.port or 5432} "
        f"user={parts.username or 'postgres'} dbname=postgres"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [name]
        ).fetchone()
        if not found:
            conn.execute(f'CREATE DATABASE "{name}"')


@contextmanager
def process(argv: list[str], **kwargs: Any) -> Iterator[subprocess.Popen[str]]:
    """Run `argv` for the block; terminate it (then kill) on the way out."""
    kwargs.setdefault("cwd", ROOT)
    proc = subprocess.Popen(argv, text=True, **kwargs)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def redis_argv(port: int) -> list[str]:
    """Return the argv of a loopback redis-server without persistence."""
    from tomori.devenv import redis_server_binary

    return [
        str(redis_server_binary()),
        *("--bind", "127.0.0.1", "--port", str(port)),
        *("--save", "", "--appendonly", "no", "--loglevel", "warning"),
    ]


def wait_for_port(port: int, *, timeout: float = 30.0) -> None:
    """Return once something accepts connections on the loopback `port`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.1)


# ------------------------------------------------------------------ readings


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Return the worker's /metrics as {sample name: {labels: value}}."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    return found


def total(metrics: dict[str, Any], name: str) -> int:
    """Return the sum of every series of `name` (0 when absent)."""
    return int(sum(metrics.get(name, {}).values()))


def by_cache(metrics: dict[str, Any], name: str) -> dict[str, float]:
    """Return {cache: value} of a per-cache series."""
    return {dict(labels)["cache"]: v for labels, v in metrics.get(name, {}).items()}


@dataclass
class Counts:
    """The pipeline's counters read from /metrics."""

    received: int = 0
    processed: int = 0
    db_unavailable: int = 0
    shed: int = 0

    @classmethod
    def read(cls, metrics: dict[str, Any]) -> Counts:
        """Return the counts in one scrape (processed: resolved, skipped or failed)."""
        turns = metrics.get("tomori_turns_total", {})
        processed = (
            total(metrics, "tomori_turns_total")
            + total(metrics, "tomori_messages_skipped_total")
            + total(metrics, "tomori_pipeline_errors_total")
        )
        unavailable = sum(
            v
            for labels, v in turns.items()
            if dict(labels)["outcome"] == "db_unavailable"
        )
        return cls(
            received=total(metrics, "tomori_messages_received_total"),
            processed=processed,
            db_unavailable=int(unavailable),
            shed=int(
                metrics.get("tomori_messages_skipped_total", {}).get(
                    (("reason", "shed"),), 0
                )
            ),
        )


def turn_quantile(
    before: dict[str, Any], after: dict[str, Any], q: float
) -> float | None:
    """Return the q-quantile of turn time between two scrapes (a bucket's upper bound)."""
    name = "tomori_turn_duration_seconds_bucket"
    buckets: dict[float, float] = {}
    for metrics, sign in ((after, 1), (before, -1)):
        for labels, value in metrics.get(name, {}).items():
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + sign * value
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    wanted = q * buckets[bounds[-1]]
    return next(le for le in bounds if buckets[le] >= wanted)
