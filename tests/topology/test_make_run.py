"""`make run` as a developer runs it: the whole topology, a second terminal, Ctrl-C.

The test runs `make serve` (what `make run` runs once the virtualenv is
installed) in a fresh copy of the checkout, with the .env that `make run`
writes (on free ports), then the README's management commands in a second
process that has no variables of its own, and stops everything with the
SIGINT a terminal sends on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults import free_port
from tests.support.processes import WatchedProcess
from tests.topology.conftest import bare_env, run_in

pytestmark = pytest.mark.e2e

PROCESSES = ("redis", "openrouter", "worker", "beat", "bot", "admin")


class Topology(WatchedProcess):
    """`make serve` in its own session (as a terminal's foreground job), output awaited."""

    def __init__(self, checkout: Path) -> None:
        super().__init__(
            ["make", "serve"], env=bare_env(), cwd=checkout, new_session=True
        )

    def started_pids(self) -> dict[str, int]:
        """Return each Procfile process's pid (honcho makes each a process group)."""
        found = (
            re.search(r"(\w+)\.1 started \(pid=(\d+)\)", line) for line in self.lines
        )
        return {m[1]: int(m[2]) for m in found if m}

    def redis_server_pid(self) -> int:
        """Return the pid of the embedded redis-server (in a session of its own)."""
        line = self.wait_for("just started")
        return int(re.search(r"pid=(\d+)", line)[1])  # type: ignore[index]

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def topology(checkout: Path) -> Iterator[tuple[Topology, Path, int]]:
    """Write the dev .env on free ports, start `make serve`; kill what is left at the end."""
    admin_port = free_port()
    ports = ["--redis-port", str(free_port()), "--openrouter-port", str(free_port())]
    done = run_in(
        checkout, "python", "-m", "tomori.devenv", "write-env", *ports,
        "--admin-port", str(admin_port), "--metrics-port", str(free_port()),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with (checkout / ".env").open("a") as env_file:
        # The bot connects half a lock TTL after taking its lock: 2 s, not 15.
        env_file.write("SHARD_LOCK_TTL_SECONDS=4\n")
    running = Topology(checkout)
    try:
        yield running, checkout, admin_port
    finally:
        groups = [running.proc.pid, *running.started_pids().values()]
        for pgid in filter(_group_alive, groups):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        redis_line = next((x for x in running.lines if "just started" in x), "")
        if match := re.search(r"pid=(\d+)", redis_line):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(match[1]), signal.SIGKILL)
        running.proc.wait(10)


def _manage(checkout: Path, *argv: str) -> str:
    done = run_in(checkout, "python", "manage.py", *argv)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done.stdout


def test_make_run_serves_the_readme_commands_and_ctrl_c_stops_everything(
    topology: tuple[Topology, Path, int],
) -> None:
    running, checkout, admin_port = topology
    assert running.wait_for("kept the existing").rstrip().endswith(".env")
    running.wait_for("demo data for scenario", timeout=90)
    running.wait_for("Ready to accept connections")  # the embedded Redis
    running.wait_for("fake OpenRouter at")
    running.wait_for("beat: Starting...")
    assert "celery@" in running.wait_for(" ready.")  # the Celery worker
    running.wait_for(f"Starting development server at http://127.0.0.1:{admin_port}/")
    up = running.wait_for(" is up", timeout=60)
    worker_id = re.search(r"worker (\S+) is up", up)[1]  # type: ignore[index]
    assert set(running.started_pids()) == set(PROCESSES)
    started = len(running.lines)

    # A second terminal: only cwd and the .env the first run wrote.
    assert f"worker {worker_id}" in _manage(checkout, "cache_stats")
    assert "1 worker answered" in _manage(checkout, "invalidate_cache", "tomori_state")
    refreshed = _manage(checkout, "refresh_catalogs", "--fresh")
    assert "1 worker answered" in refreshed and "text ok" in refreshed
    assert "1 worker answered" in _manage(checkout, "emergency_clear", "--yes")
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/admin/login/") as page:
        assert page.status == 200

    # The Celery worker fetches from the fake OpenRouter the bot uses.
    call = run_in(
        checkout, "celery", "-A", "tomori", "call", "caches.refresh_openrouter_catalogs",
        "--kwargs", '{"force": true}',
    )  # fmt: skip
    assert call.returncode == 0, call.stderr
    task = call.stdout.strip()
    line = running.wait_for(f"refresh_openrouter_catalogs[{task}] succeeded")
    assert "'text': 'refreshed'" in line and "'video': 'refreshed'" in line
    assert list((checkout / "var").glob("celerybeat-schedule*"))

    pids = running.started_pids()
    redis_server = running.redis_server_pid()
    running.ctrl_c()
    assert running.wait_exit(timeout=30) != 0  # make reports the interrupt
    for name in PROCESSES:
        assert f"{name}.1 stopped" in running.output
    assert "SIGKILL" not in running.output  # each stopped on its SIGTERM
    survivors = {name: pid for name, pid in pids.items() if _group_alive(pid)}
    assert survivors == {}
    assert not _alive(redis_server)
    # Redis waits for its clients (up to a grace period under honcho's own
    # kill timeout): the bot released its lock and withdrew its snapshot.
    stopping = running.output[running.output.index("SIGINT received") :]
    assert "Connection refused" not in stopping
    assert "could not release the shard lock" not in stopping
    # A calm start (the clear above warns, as it should), no traceback at all.
    assert [x for x in running.lines[:started] if "WARNING" in x] == []
    assert [x for x in running.lines if "Traceback" in x] == []
