"""Measure the cache dashboard with 1, 3 and 16 live bot workers: render time, HTML, height.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     REDIS_URL=redis://127.0.0.1:6379/12 \\
     .venv/bin/python benchmarks/dashboard_render.py [--workers 1,3,16] \\
       [--base-root /work/wt/base] [--rounds 30] [--no-browser]

For each worker count N it starts one simulated Discord (`python -m
tomori.bot.simulator`, the small scenario, with traffic) and N real `manage.py
runbot --simulator-url ... --shard-ids i --shard-count N` processes on a bus
channel of their own, and waits until all N publish live snapshots. Then a
child process per checkout (this tree; and the one at --base-root, its root
first on sys.path, with this tree's virtual environment) measures its
dashboard against those snapshots:

- server-side render: the whole GET through Django's test client as a logged-in
  cache manager (Redis reads, database queries, templates), best and median of
  --rounds, after one warm-up request;
- HTML size of the page;
- in Chromium (Debian's, via playwright) at 1,280 x 1,000 with the admin's
  sidebar open: the page height, in screens of 1,000 px, where the lowest
  worker id ends, and horizontal overflow at 1,024 px (page width minus
  window width; 0 is no sideways scroll). Screenshots go to var/screenshots/.

Prints one row per checkout and N, then base/this ratios, then PASS/FAIL
lines for this tree's bars (issue 38: with 16 workers a render median of at
most 200 ms, at most 120 KB of HTML, at most two screens, no overflow at
1,024 px; with 3 workers every worker id within the first 1,000 px); exits 1
if one fails. The database is created, migrated and seeded with the small
scenario if needed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/tomori_bench"
DASHBOARD = "/admin/caches/cachecontrol/"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
LIVE_WAIT_SECONDS = 180.0
WIDTH, HEIGHT, NARROW = 1280, 1000, 1024
#: Where the dashboard remembers that its auto-refresh is off.
REFRESH_KEY = "tomori.cacheDashboard.autoRefresh"


# ---------------------------------------------------------------- the fleet


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _env(channel: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "TOMORI_BUS_CHANNEL": channel,
        "PYTHONUNBUFFERED": "1",
    }


def _wait_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.split(":", 1)[1].strip()
    raise RuntimeError(f"the simulator exited before printing {prefix!r}")


class Fleet:
    """A simulated Discord and N runbot processes, one shard each."""

    def __init__(self, count: int, channel: str, log_dir: Path) -> None:
        self.count, self.channel = count, channel
        env = _env(channel)
        self.simulator = subprocess.Popen(
            [sys.executable, "-m", "tomori.bot.simulator", "--traffic", "20"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        rest = _wait_line(self.simulator, "REST base:")
        url = rest.split("/api/")[0]
        threading.Thread(target=self._drain, daemon=True).start()
        env.update(
            WORKER_SNAPSHOT_INTERVAL_SECONDS="2",
            SHARD_LOCK_TTL_SECONDS="4",
            LOG_LEVEL="WARNING",
        )
        self.bots = []
        for shard in range(count):
            log = (log_dir / f"runbot-{count}-{shard}.log").open("w")
            args = ["--simulator-url", url, "--shard-ids", str(shard)]
            args += ["--shard-count", str(count)]
            bot_env = {
                **env,
                "METRICS_PORT": str(_free_port()),
                # A pod's name, as a Kubernetes deployment would give it.
                "TOMORI_WORKER_ID": f"tomori-bot-7c9f8d6b5-{uuid.uuid4().hex[:5]}",
            }
            self.bots.append(
                subprocess.Popen(
                    [sys.executable, "manage.py", "runbot", *args],
                    cwd=ROOT,
                    env=bot_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )

    def _drain(self) -> None:
        assert self.simulator.stdout is not None
        for _ in self.simulator.stdout:
            pass

    def wait_live(self) -> float:
        """Wait until every worker has published a snapshot; return the seconds it took."""
        import redis

        started = time.monotonic()
        client = redis.Redis.from_url(os.environ["REDIS_URL"])
        pattern = f"{self.channel}:worker:*"
        while time.monotonic() - started < LIVE_WAIT_SECONDS:
            dead = [bot.args for bot in self.bots if bot.poll() is not None]
            if dead:
                raise RuntimeError(f"runbot exited: {dead[0]}")
            if len(list(client.scan_iter(match=pattern))) >= self.count:
                return time.monotonic() - started
            time.sleep(0.5)
        raise RuntimeError(f"{self.count} workers were not live in time")

    def stop(self) -> None:
        for proc in [*self.bots, self.simulator]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.bots, self.simulator]:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


# ---------------------------------------------------------------- child side


def _setup(root: Path) -> None:
    sys.path.insert(0, str(root))
    os.chdir(root)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")
    import django

    django.setup()


def _manager() -> Any:
    from django.contrib.auth.models import Permission, User

    user, _ = User.objects.get_or_create(
        username="bench-operator", defaults={"is_staff": True}
    )
    user.user_permissions.add(Permission.objects.get(codename="manage_caches"))
    return user


def _render(rounds: int) -> dict[str, Any]:
    from django.test import Client

    client = Client()
    client.force_login(_manager())
    response = client.get(DASHBOARD)  # warm-up: imports, template compilation
    assert response.status_code == 200, response.status_code
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(DASHBOARD)
        times.append((time.perf_counter() - started) * 1000)
    html = response.content.decode()
    return {
        "best_ms": min(times),
        "median_ms": statistics.median(times),
        "bytes": len(response.content),
        "workers_shown": len(set(re.findall(r'data-worker="([^"]+)"', html))),
        "session": client.cookies["sessionid"].value,
    }


def _serve() -> str:
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.core.handlers.wsgi import WSGIHandler

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, StaticFilesHandler(WSGIHandler()))
    server.RequestHandlerClass = Quiet
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}"


_MEASURE_JS = """() => {
  // The id itself: a row's link (this tree), a section's heading (the old page).
  const ids = [...document.querySelectorAll("[data-worker]")]
    .map(e => e.querySelector(".worker-id a, h2 code") || e);
  const ends = ids.map(e => e.getBoundingClientRect().bottom + window.scrollY);
  return {height: document.documentElement.scrollHeight,
          lowest_worker: ends.length ? Math.max(...ends) : null,
          overflow: document.documentElement.scrollWidth - window.innerWidth};
}"""


def _browse(session: str, label: str, count: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    base = _serve()
    shots = ROOT / "var" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox"]
        )
        context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        # The page's own 10 s refresh would race a slow load and the reload.
        context.add_init_script(f"localStorage.setItem({REFRESH_KEY!r}, 'off')")
        page = context.new_page()
        page.goto(base + DASHBOARD)
        wide = page.evaluate(_MEASURE_JS)
        page.screenshot(
            path=str(shots / f"dashboard-{label}-{count}w-1280.png"), full_page=True
        )
        page.set_viewport_size({"width": NARROW, "height": HEIGHT})
        page.reload()
        narrow = page.evaluate(_MEASURE_JS)
        browser.close()
    return {
        "height_px": wide["height"],
        "screens": round(wide["height"] / HEIGHT, 2),
        "lowest_worker_px": wide["lowest_worker"],
        "overflow_1024_px": narrow["overflow"],
    }


def child(options: argparse.Namespace) -> None:
    """Measure one checkout's dashboard; print the figures as one JSON line."""
    _setup(Path(options.root))
    figures = _render(options.rounds)
    session = figures.pop("session")
    if options.browser:
        figures.update(_browse(session, options.label, options.count))
    print(json.dumps(figures), flush=True)


# ---------------------------------------------------------------- parent side


def _prepare_database() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tomori.settings_test")
    import django
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    db = settings.DATABASES["default"]
    dsn = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
    call_command("migrate", verbosity=0)
    call_command("seed_demo", "--no-user", verbosity=0)


def _measure(root: Path, label: str, count: int, options: Any, channel: str) -> Any:
    args = [sys.executable, __file__, "--child", "--root", str(root)]
    args += ["--label", label, "--count", str(count), "--rounds", str(options.rounds)]
    args += [] if options.browser else ["--no-browser"]
    done = subprocess.run(
        args, cwd=root, env=_env(channel), capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"{label} child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(label: str, count: int, f: dict[str, Any]) -> str:
    browser = ""
    if "height_px" in f:
        browser = (
            f" | {f['height_px']:>6,} px ({f['screens']:.2f} screens)"
            f" | lowest worker id ends at {f['lowest_worker_px']:,.0f} px"
            f" | overflow at 1,024: {f['overflow_1024_px']} px"
        )
    return (
        f"{label:>5} {count:>2} workers ({f['workers_shown']} shown) | render best "
        f"{f['best_ms']:6.1f} ms, median {f['median_ms']:6.1f} ms | "
        f"{f['bytes'] / 1000:6.1f} KB{browser}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="1,3,16")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--base-root", default="")
    parser.add_argument("--no-browser", dest="browser", action="store_false")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--label", default="this", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    options = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE)
    if options.child:
        child(options)
        return
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")
    print("command:", " ".join(sys.argv), f"(rounds {options.rounds})")
    print(f"load average at start: {os.getloadavg()}")
    _prepare_database()
    roots = [("this", ROOT)]
    if options.base_root:
        roots.append(("base", Path(options.base_root).resolve()))
    results: dict[tuple[str, int], dict[str, Any]] = {}
    log_dir = ROOT / "var" / "bench-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    for count in [int(n) for n in options.workers.split(",")]:
        channel = f"tomori:bench-dashboard:{uuid.uuid4().hex[:12]}"
        fleet = Fleet(count, channel, log_dir)
        try:
            took = fleet.wait_live()
            print(f"{count} runbot workers live after {took:.0f} s")
            time.sleep(5)  # a few snapshots with traffic figures
            for label, root in roots:
                figures = _measure(root, label, count, options, channel)
                results[(label, count)] = figures
                print(_row(label, count, figures), flush=True)
        finally:
            fleet.stop()
    _ratios(results)
    print(f"load average at end: {os.getloadavg()}")
    verdicts = [_bar(name, ok) for name, ok in _bars(results)]
    sys.exit(0 if all(verdicts) else 1)


def _bars(results: dict[tuple[str, int], dict[str, Any]]) -> list[tuple[str, bool]]:
    bars = []
    if (many := results.get(("this", 16))) is not None:
        bars += [
            (
                f"16 workers: render median {many['median_ms']:.1f} ms <= 200 ms",
                many["median_ms"] <= 200,
            ),
            (
                f"16 workers: {many['bytes']:,} bytes of HTML <= 120 KB",
                many["bytes"] <= 120_000,
            ),
        ]
        if "height_px" in many:
            bars += [
                (
                    f"16 workers: {many['height_px']:,} px <= 2 screens",
                    many["height_px"] <= 2 * HEIGHT,
                ),
                (
                    f"16 workers: {many['overflow_1024_px']} px overflow at 1,024",
                    many["overflow_1024_px"] <= 0,
                ),
            ]
    few = results.get(("this", 3))
    if few is not None and few.get("lowest_worker_px") is not None:
        lowest = few["lowest_worker_px"]
        bars.append(
            (
                f"3 workers: lowest worker id ends at {lowest:,.0f} px <= 1,000",
                lowest <= HEIGHT,
            )
        )
    return bars


def _bar(name: str, ok: bool) -> bool:
    print(f"{'PASS' if ok else 'FAIL'} {name}")
    return ok


def _ratios(results: dict[tuple[str, int], dict[str, Any]]) -> None:
    for (label, count), base in sorted(results.items()):
        this = results.get(("this", count))
        if label != "base" or this is None:
            continue
        parts = [
            f"render median {base['median_ms'] / this['median_ms']:.2f}x",
            f"HTML {base['bytes'] / this['bytes']:.2f}x",
        ]
        if "height_px" in this:
            parts.append(f"height {base['height_px'] / this['height_px']:.2f}x")
        print(f"base/this at {count} workers: " + ", ".join(parts))


if __name__ == "__main__":
    main()
