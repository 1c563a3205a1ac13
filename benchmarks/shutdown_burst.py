"""Shutdown under a burst: SIGTERM a worker far behind its traffic; what it drops and stores, how fast.

Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/tomori_bench \\
     .venv/bin/python benchmarks/shutdown_burst.py [--rate 1200] [--scenario production]

Production's shape, as in benchmarks/runbot_rss.py: a redis-server of its
own, the fake OpenRouter, the simulated Discord in its own process sending
--rate messages a second (far above what one worker resolves: a few hundred
on a 2-core host), and `manage.py runbot --simulate --simulator-url ...`
with production settings (PIPELINE_WORKERS 512, PIPELINE_MAX_WAITING 5000,
WORKER_SHUTDOWN_TIMEOUT_SECONDS 15 unless given). The short-term memory
table is emptied first, so it holds this run's turns only. Once the worker
is ready and its intake's queue is full (the first message shed) and
--burst-seconds more have passed, the worker gets SIGTERM: a rolling
restart of a busy worker.

Printed: seconds from the signal to each step of the shutdown (intake
closed, running turns ended, the durable flush's report) and to the exit;
the waiting messages dropped; how the running turns ended; the durable
writes not stored; the replies sent, failed and cancelled; the exit code;
and the table against the turns the worker resolved (an OK turn stores its
user key and its server key, a DM its user key).

--worker-tree DIR runs the worker of another checkout on the same setup
(what main did: `git worktree add /tmp/main main`); its log may lack the
newer shutdown lines, the bars read what it has.

Bars (PASS/FAIL, exit 1 on a FAIL): exit 0 within the shutdown timeout;
0 keys not stored; no reply failed ("Session is closed"); the table holds
every turn the worker resolved.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from processes import (
    ROOT,
    STOP_TIMEOUT_SECONDS,
    add_database_url,
    base_env,
    exit_on_sigterm,
    free_port,
    load_average,
    prepare_database,
    process,
    redis_argv,
    wait_for_port,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/tomori_bench"
READY_TIMEOUT_SECONDS = 300.0
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
#: The shutdown's steps, by the log line that ends each (tomori/bot/worker.py).
STEPS = (
    ("intake closed", "shutdown: intake closed"),
    ("running turns ended", "shutdown: the running turns ended"),
    ("durable flush reported", "short-term memory: "),
    ("worker stopped", " stopped"),
)


@dataclass
class Shutdown:
    """What one SIGTERM did."""

    timeout: float
    exit_code: int | None = None
    seconds: float = 0.0  # signal to exit
    steps: dict[str, float] = field(default_factory=dict)  # step -> s after signal
    lines: dict[str, str] = field(default_factory=dict)  # step -> its line
    session_closed: int = 0  # replies that met a closed HTTP session
    reply_failures: int = 0
    ok_turns: int = 0
    dm_turns: int = 0
    table: dict[str, int] = field(default_factory=dict)  # scope -> sum of turn_count
    load: str = ""

    @property
    def keys_behind(self) -> int:
        """Return the durable writes the flush reported not stored."""
        found = re.search(r"(\d+) durable writes \(keys\) not stored", self._line())
        return int(found.group(1)) if found else 0

    def _line(self) -> str:
        return self.lines.get("durable flush reported", "")


def run(options: argparse.Namespace) -> Shutdown:
    """Start Redis, the fake OpenRouter, the simulator and runbot; SIGTERM it mid-burst."""
    env = base_env(options.database_url)
    if not options.skip_seed:
        prepare_database(env, options.scenario)
    _empty_memory_table(options.database_url)
    redis_port, openrouter_port, sim_port = free_port(), free_port(), free_port()
    env |= {
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "OPENROUTER_BASE_URL": f"http://127.0.0.1:{openrouter_port}/api/v1",
        **dict(setting.split("=", 1) for setting in options.set),
    }
    shutdown = Shutdown(timeout=float(env.get("WORKER_SHUTDOWN_TIMEOUT_SECONDS", 15)))
    simulator = [sys.executable, "-m", "tomori.bot.simulator"]
    simulator += ["--scenario", options.scenario, "--port", str(sim_port)]
    simulator += ["--traffic", str(options.rate)]
    manage = os.path.join(options.worker_tree, "manage.py")  # its own sys.path[0]
    worker = [sys.executable, manage, "runbot", "--simulate"]
    worker += ["--simulator-url", f"http://127.0.0.1:{sim_port}"]
    fake = [sys.executable, "-m", "caches.catalogs.fake_server"]
    with (
        open(options.log, "w") as log,
        process(redis_argv(redis_port), stdout=subprocess.DEVNULL),
        process([*fake, "--port", str(openrouter_port)], env=env, stdout=log),
        process(simulator, env=env, stdout=log, stderr=subprocess.STDOUT),
    ):
        wait_for_port(redis_port)
        wait_for_port(openrouter_port)
        wait_for_port(sim_port, timeout=READY_TIMEOUT_SECONDS)
        with process(worker, env=env, stdout=log, stderr=subprocess.STDOUT) as bot:
            _wait_for(bot, options.log, ("bot ready", "message(s) shed so far"))
            time.sleep(options.burst_seconds)  # the burst goes on, the queue full
            shutdown.load = load_average()
            signalled_wall, signalled = time.time(), time.monotonic()
            bot.send_signal(signal.SIGTERM)
            shutdown.exit_code = bot.wait(STOP_TIMEOUT_SECONDS)
            shutdown.seconds = time.monotonic() - signalled
    _read_log(options.log, signalled_wall, shutdown)
    shutdown.table = _memory_table(options.database_url)
    return shutdown


def _empty_memory_table(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE short_term_memory")


def _memory_table(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT scope, SUM(turn_count) FROM short_term_memory GROUP BY scope"
        ).fetchall()
    return {scope: int(total) for scope, total in rows}


def _wait_for(bot: subprocess.Popen[str], path: str, texts: tuple[str, ...]) -> None:
    """Return once the worker's log holds every one of `texts`."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if bot.poll() is not None:
            raise RuntimeError(f"runbot exited with {bot.returncode}: see {path}")
        with open(path) as log:
            text = log.read()
        if all(t in text for t in texts):
            return
        time.sleep(0.25)
    raise RuntimeError(f"no {texts} in {path} in time")


def _read_log(path: str, signalled: float, shutdown: Shutdown) -> None:
    """Read the shutdown's lines (those logged after the signal) into `shutdown`."""
    with open(path) as log:
        for line in log:
            stamp = LOG_TIME.match(line)
            at = _epoch(stamp.group(1)) if stamp else None
            if at is None or at < signalled - 0.001:
                continue
            shutdown.session_closed += "Session is closed" in line
            shutdown.reply_failures += bool(re.search(r"reply in \d+ failed", line))
            for step, marker in STEPS:
                if marker in line and step not in shutdown.steps:
                    shutdown.steps[step] = at - signalled
                    shutdown.lines[step] = line.strip()
            if "turns resolved:" in line:
                shutdown.lines["turns resolved"] = line.strip()
                shutdown.ok_turns = _count(line, r"'ok': (\d+)")
                shutdown.dm_turns = _count(line, r"'dm': (\d+)")


def _epoch(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _count(line: str, pattern: str) -> int:
    found = re.search(pattern, line)
    return int(found.group(1)) if found else 0


def report(shutdown: Shutdown, options: argparse.Namespace) -> bool:
    """Print the figures; return whether every bar passed."""
    print("\n== SIGTERM during a burst (the real runbot, production settings) ==")
    print(
        f"scenario {options.scenario}, simulator at {options.rate:g} msg/s, SIGTERM "
        f"{options.burst_seconds:g} s after the intake's queue filled; "
        f"load {shutdown.load}"
    )
    for step, seconds in shutdown.steps.items():
        print(f"  +{seconds:6.2f} s  {_message(shutdown.lines[step])}")
    print(f"  +{shutdown.seconds:6.2f} s  process exited, code {shutdown.exit_code}")
    if "turns resolved" in shutdown.lines:
        print(f"  {_message(shutdown.lines['turns resolved'])}")
    expected = {
        "user": shutdown.ok_turns + shutdown.dm_turns,
        "server": shutdown.ok_turns,
    }
    stored = {scope: shutdown.table.get(scope, 0) for scope in expected}
    print(f"short-term memory table (turns per scope): {stored}; resolved: {expected}")
    bars = [
        (
            f"exit 0 within WORKER_SHUTDOWN_TIMEOUT_SECONDS ({shutdown.timeout:g} s)",
            shutdown.exit_code == 0 and shutdown.seconds <= shutdown.timeout,
            f"exit {shutdown.exit_code} after {shutdown.seconds:.2f} s",
        ),
        ("0 keys behind", shutdown.keys_behind == 0, f"{shutdown.keys_behind} keys"),
        (
            "no reply failed (Session is closed)",
            shutdown.reply_failures == 0 and shutdown.session_closed == 0,
            f"{shutdown.reply_failures} failed, {shutdown.session_closed} closed",
        ),
        ("the table holds every resolved turn", stored == expected, f"{stored}"),
    ]
    print()
    for label, passed, figure in bars:
        print(f"{'PASS' if passed else 'FAIL'}  {label}: {figure}")
    return all(passed for _, passed, _ in bars)


def _message(line: str) -> str:
    """Return a log line without its time, level and logger."""
    return line.split(": ", 1)[1] if ": " in line else line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Return the command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="production")
    parser.add_argument("--rate", type=float, default=1200.0, help="messages/s")
    parser.add_argument(
        "--burst-seconds",
        type=float,
        default=5.0,
        help="how long the burst goes on after the queue filled, before SIGTERM",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for the worker (e.g. PIPELINE_WORKERS=64); repeatable",
    )
    parser.add_argument(
        "--worker-tree",
        default=str(ROOT),
        metavar="DIR",
        help="run the worker of another checkout (e.g. a `git worktree` of main, "
        "for its figures beside this one's)",
    )
    parser.add_argument("--skip-seed", action="store_true")
    parser.add_argument("--log", default="/tmp/shutdown_burst.log", help="output")
    add_database_url(parser, DEFAULT_DATABASE_URL)
    return parser.parse_args(argv)


def main() -> int:
    """Run the benchmark; exit 1 on a FAIL."""
    options = parse_args()
    exit_on_sigterm()
    print(f"shutdown burst: {options.scenario} at {options.rate:g} msg/s ...")
    return 0 if report(run(options), options) else 1


if __name__ == "__main__":
    sys.exit(main())
