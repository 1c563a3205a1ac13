"""Benchmark what a Django write costs with the database's change capture, side by side.

Run: .venv/bin/python benchmarks/write_overhead.py [--rounds 5] [--old /tmp/oldmain]

Variants, each a fresh child process per round, rounds interleaved (the
order rotates every round) so load on the machine falls on all of them:
- triggers: this tree, capture triggers installed (`caches.outbox.capture.sync`);
- dropped: this tree, the same code with every capture trigger dropped;
- old: with --old, a checkout of main before the capture (`git worktree add
  /tmp/oldmain a534edc`) on a database of its own, migrated by that tree.
The load, per child: SAVES ORM saves of one persona each (own transaction),
SAVES single-row queryset updates, one queryset update of ROWS rows and one
`bulk_update` of ROWS personas (ROWS servers, one persona each). Each write
changes `name` (read by three layers), so every trigger records events.
Prints the median per operation and variant, and triggers/dropped and
triggers/old ratios against the bar (at most 1.3x). Not a pass/fail test.
The databases (tomori_bench_writers, tomori_bench_writers_old) are created,
migrated and seeded if missing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BASE_URL = "postgres://postgres@127.0.0.1:5432/"
SAVES = 100
ROWS = 10_000
DISC = 930_000_000_000_000_000
BAR = 1.3
OPS = ("save", "update 1 row", f"update {ROWS:,} rows", f"bulk_update {ROWS:,}")


# ---------------------------------------------------------------- child


def _setup(root: Path) -> None:
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
    os.environ["TOMORI_ENV_FILE"] = os.devnull
    import django

    django.setup()


def _prepare() -> None:
    """Create, migrate and seed the database if needed; empty its outbox."""
    import psycopg
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    db = settings.DATABASES["default"]
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
        ).fetchone():
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM servers WHERE server_disc_id > %s", [DISC])
        if cursor.fetchone()[0] < ROWS:
            _seed(cursor)
        cursor.execute("TRUNCATE caches_invalidation_outbox RESTART IDENTITY")


def _seed(cursor: Any) -> None:
    cursor.execute(
        "INSERT INTO servers (server_disc_id, name, tool_use_enabled, "
        "emoji_usage_enabled, sticker_usage_enabled, channel_whitelist_enabled, "
        "created_at, updated_at) SELECT %s + g, 'bench', false, false, false, "
        "false, now(), now() FROM generate_series(1, %s) g",
        [DISC, ROWS],
    )
    cursor.execute(
        "INSERT INTO personas (name, is_main, position, system_prompt, avatar_url, "
        "tools_enabled, created_at, updated_at, server_id) SELECT 'A', true, 0, "
        "'', '', false, now(), now(), id FROM servers WHERE server_disc_id > %s",
        [DISC],
    )


def _set_triggers(mode: str) -> None:
    from django.db import connection

    if mode == "none":
        return
    from caches.outbox import capture

    if mode == "on":
        capture.sync(connection)
    else:
        capture.drop_all(connection)


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _measure(tag: str, *, big: bool = True) -> dict[str, float]:
    """Run the load once (without the ROWS-row writes unless `big`); return seconds per op."""
    from caches import bus

    try:
        from tomori.domain.models import Persona
    except ImportError:  # a checkout from before tomori.domain (issue 30)
        from tomori.models import Persona

    bus.configure(redis_url="", channel=f"tomori:bench:writers:{os.getpid()}")
    mine = Persona.objects.filter(server__server_disc_id__gt=DISC)
    some = list(mine.order_by("id")[:SAVES])
    every = list(mine.order_by("id"))

    def saves() -> None:
        for i, persona in enumerate(some):
            persona.name = f"{tag}s{i}"
            persona.save()

    def updates() -> None:
        for i, persona in enumerate(some):
            Persona.objects.filter(pk=persona.pk).update(name=f"{tag}u{i}")

    def bulk() -> None:
        for persona in every:
            persona.name = f"{tag}b"
        Persona.objects.bulk_update(every, ["name"])

    found = {OPS[0]: _timed(saves) / SAVES, OPS[1]: _timed(updates) / SAVES}
    if big:
        found[OPS[2]] = _timed(lambda: mine.update(name=f"{tag}q"))
        found[OPS[3]] = _timed(bulk)
    return found


def child(args: argparse.Namespace) -> None:
    _setup(Path(args.root))
    if args.prepare:
        _prepare()
        return
    _set_triggers(args.triggers)
    _measure(f"w{args.tag}", big=False)  # warm-up: caches, plans, connection
    print(json.dumps(_measure(f"r{args.tag}")))


# ---------------------------------------------------------------- parent


def _run(variant: tuple[str, Path, str, str], *extra: str) -> str:
    _, root, db, mode = variant
    done = subprocess.run(
        [sys.executable, __file__, "--child", "--root", str(root)]
        + ["--triggers", mode, *extra],
        env={**os.environ, "DATABASE_URL": BASE_URL + db, "REDIS_URL": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        sys.exit(f"{variant[0]} failed:\n{done.stderr}")
    return done.stdout


def parent(args: argparse.Namespace) -> None:
    variants = [
        ("triggers", ROOT, "tomori_bench_writers", "on"),
        ("dropped", ROOT, "tomori_bench_writers", "off"),
    ]
    if args.old:
        variants.append(("old", Path(args.old), "tomori_bench_writers_old", "none"))
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"load per child and round: {SAVES} saves, {SAVES} one-row updates, one "
        f"update of {ROWS:,} rows, one bulk_update of {ROWS:,}; {args.rounds} "
        f"rounds interleaved; load average {os.getloadavg()[0]:.1f}"
    )
    for variant in {v[2]: v for v in variants}.values():
        _run(variant, "--prepare")
    found: dict[str, dict[str, list[float]]] = {v[0]: {} for v in variants}
    for r in range(args.rounds):
        for variant in variants[r % len(variants) :] + variants[: r % len(variants)]:
            result = json.loads(_run(variant, "--tag", str(r)).splitlines()[-1])
            for op, seconds in result.items():
                found[variant[0]].setdefault(op, []).append(seconds)
    _report(found, [v[0] for v in variants])


def _report(found: dict[str, dict[str, list[float]]], names: list[str]) -> None:
    med = {n: {op: statistics.median(found[n][op]) for op in OPS} for n in names}
    head = "".join(f"{n:>14}" for n in names)
    ratios = "".join(f"{'triggers/' + n:>18}" for n in names[1:])
    print(f"{'median per operation':<22}{head}{ratios}")
    for op in OPS:
        cells = "".join(f"{med[n][op] * 1000:>11.2f} ms" for n in names)
        marks = ""
        for n in names[1:]:
            ratio = med["triggers"][op] / med[n][op]
            marks += f"{ratio:>14.2f}x {'ok' if ratio <= BAR else '>1.3'}"
        print(f"{op:<22}{cells}{marks}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--old", help="a checkout of main before the capture")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--triggers", default="on", help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    child(args) if args.child else parent(args)


if __name__ == "__main__":
    main()
