#!/usr/bin/env python3
"""A newcomer's first command, for real: `make run` in a fresh clone of the committed tree.

    python3 .ci/smoke_make_run.py [--python python3.13] [--keep]

Clones HEAD into a temporary folder, runs `make run` there (it builds its own
.venv with PYTHON, writes its .env, migrates, seeds and starts the Procfile
under honcho) on free ports given in the environment (which wins over the
.env), waits for the admin, and 60 s later checks that every Procfile process
is still up, that the bot served turns and that beat's first catalog refresh
ran in the Celery worker, and that from the serve step on the output holds no
traceback and no WARNING. Then Ctrl-C (SIGINT to the foreground job) stops
it: every process must be gone within 15 s. Exits 1 naming what failed, with
the output's tail. Only the standard library (and the tests' process
watcher, which needs no more): it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.processes import WatchedProcess  # noqa: E402  (standard library only)

PROCESSES = ("redis", "openrouter", "worker", "beat", "bot", "admin")
ADMIN_TIMEOUT = 600.0  # the install: a first one downloads every wheel
UP_FOR = 60.0
SERVED_TIMEOUT = 60.0  # the bot's traffic line comes each minute from its start
STOP_TIMEOUT = 15.0
# What the environment may pass on: a terminal's basics, pyenv, pip's settings.
PASSED_ON = re.compile(r"^(PATH|HOME|LANG|LC_\w+|TERM|TMPDIR|PYENV_\w+|PIP_\w+)$")
SERVE_STARTS = "tomori.devenv write-env"  # what comes before is the install
STARTED = re.compile(r"\| (\w+)\.1 started \(pid=(\d+)\)")
TURNS = re.compile(r"traffic: (\d+) turn\(s\) in the last minute")
REFRESHED = re.compile(r"refresh_openrouter_catalogs\[[\w-]+\] succeeded")


class Failed(Exception):
    """A check failed: its message says which."""


class MakeRun(WatchedProcess):
    """`make run` as a terminal's foreground job, its output collected as it comes."""

    def __init__(self, clone: Path, env: dict[str, str], python: str | None) -> None:
        argv = ["make", "run"] + ([f"PYTHON={python}"] if python else [])
        super().__init__(argv, env=env, cwd=clone, new_session=True)

    def expect(self, pattern: re.Pattern[str], timeout: float, what: str) -> str:
        """Return the first line matching `pattern`, reading on for up to `timeout`."""
        try:
            return self.wait_for(pattern, timeout)
        except AssertionError:  # its message holds the whole output: the tail will do
            ended = "make run ended before" if self.ended else "no"
            raise Failed(f"{ended} {what} within {timeout:g} s") from None

    def serve_output(self) -> list[str]:
        """Return the lines from the serve step on (the install's are pip's)."""
        starts = next(
            (i for i, line in enumerate(self.lines) if SERVE_STARTS in line), 0
        )
        return self.lines[starts:]

    def pids(self) -> dict[str, int]:
        """Return each Procfile process's pid, from honcho's "started" lines."""
        found = (STARTED.search(line) for line in self.lines)
        return {m[1]: int(m[2]) for m in found if m}

    def ctrl_c(self) -> None:
        os.killpg(self.proc.pid, signal.SIGINT)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def smoke_env() -> tuple[dict[str, str], int]:
    """Return a new terminal's environment with free ports for every server; and the admin's."""
    env = {k: v for k, v in os.environ.items() if PASSED_ON.match(k)}
    admin = free_port()
    env.update(
        REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",
        OPENROUTER_BASE_URL=f"http://127.0.0.1:{free_port()}/api/v1",
        TOMORI_ADMIN_PORT=str(admin),
        METRICS_PORT=str(free_port()),
    )
    return env, admin


def admin_answers(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/admin/login/"
    try:
        with urllib.request.urlopen(url, timeout=2) as page:
            return bool(page.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def wait_for_admin(run: MakeRun, port: int) -> None:
    deadline = time.monotonic() + ADMIN_TIMEOUT
    while not admin_answers(port):
        if time.monotonic() >= deadline:
            raise Failed(
                f"the admin did not answer on :{port} within {ADMIN_TIMEOUT:g} s"
            )
        if not run.collect(time.monotonic() + 1):
            raise Failed("make run ended before the admin answered")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def processes_in(folder: Path) -> list[str]:
    """Return "pid command" of every process whose working folder is inside `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if cwd == str(folder) or cwd.startswith(f"{folder}/"):
            found.append(f"{entry.name} {command.strip()}")
    return found


def check_up(run: MakeRun) -> None:
    pids = run.pids()
    missing = sorted(set(PROCESSES) - set(pids))
    if missing:
        raise Failed(f"honcho never started {', '.join(missing)}")
    stopped = [name for name, pid in sorted(pids.items()) if not alive(pid)]
    if stopped:
        raise Failed(f"not up after {UP_FOR:g} s: {', '.join(stopped)}")


def check_served(run: MakeRun) -> str:
    line = run.expect(TURNS, SERVED_TIMEOUT, "traffic line of the bot")
    if int(TURNS.search(line)[1]) == 0:  # type: ignore[index]
        raise Failed(f"the bot served no turn: {line.strip()}")
    run.expect(REFRESHED, SERVED_TIMEOUT, "catalog refresh in the Celery worker")
    return line


def check_calm(run: MakeRun) -> None:
    loud = [
        line.rstrip()
        for line in run.serve_output()
        if "Traceback" in line or "WARNING" in line
    ]
    if loud:
        raise Failed("the output holds a traceback or a WARNING:\n" + "\n".join(loud))


def stop(run: MakeRun, clone: Path) -> float:
    """Ctrl-C; return how long until no process is left in the clone."""
    asked = time.monotonic()
    run.ctrl_c()
    deadline = asked + STOP_TIMEOUT
    while True:
        run.collect(min(deadline, time.monotonic() + 0.2))
        left = processes_in(clone)
        if not left and run.proc.poll() is not None:
            return time.monotonic() - asked
        if time.monotonic() >= deadline:
            raise Failed(f"still running {STOP_TIMEOUT:g} s after Ctrl-C: {left}")


def kill_what_is_left(run: MakeRun, clone: Path) -> None:
    for pid in [run.proc.pid, *run.pids().values()]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for entry in processes_in(clone):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(entry.split()[0]), signal.SIGKILL)
    run.proc.wait(10)


def smoke(clone: Path, python: str | None) -> None:
    env, admin = smoke_env()
    started = time.monotonic()
    run = MakeRun(clone, env, python)
    try:
        wait_for_admin(run, admin)
        ready = time.monotonic() - started
        version = subprocess.run(
            [clone / ".venv" / "bin" / "python", "--version"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        print(f"admin answered {ready:.0f} s after `make run` ({version} venv built)")
        run.collect(time.monotonic() + UP_FOR)
        check_up(run)
        served = check_served(run)
        print(f"after {UP_FOR:g} s: {len(PROCESSES)} processes up; {served.strip()}")
        print("beat's first catalog refresh ran in the worker")
        took = stop(run, clone)
        print(f"Ctrl-C: every process gone {took:.1f} s later")
        check_calm(run)
        print("from the serve step on, no traceback and no WARNING")
    except Failed:
        tail = "".join(run.lines[-80:])
        print(f"--- the last lines of make run ---\n{tail}---", file=sys.stderr)
        raise
    finally:
        if run.proc.poll() is None or processes_in(clone):
            kill_what_is_left(run, clone)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="make run PYTHON=... (default: make's own)")
    parser.add_argument("--keep", action="store_true", help="keep the clone")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tomori-smoke-"))
    clone = folder / "tomori"
    started = time.monotonic()
    try:
        subprocess.run(
            ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)],
            check=True,
        )
        head = subprocess.run(
            ["git", "-C", str(clone), "log", "-1", "--format=%h %s"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        print(f"smoke of make run{f' PYTHON={args.python}' if args.python else ''} "
              f"in a fresh clone of {head[:60]} ({clone})")  # fmt: skip
        smoke(clone, args.python)
    except Failed as exc:
        print(f"smoke FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(f"smoke passed in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
