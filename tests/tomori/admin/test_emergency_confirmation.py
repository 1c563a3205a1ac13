"""emergency_clear asks first: on a terminal it waits for a yes, without one it refuses."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from caches.core import BoundedTTLCache
from tests.support.faults import free_port
from tomori.management.commands.emergency_clear import QUESTION

ROOT = Path(__file__).resolve().parents[3]
SENT = "no worker answered"  # what a command sent on a bus without workers says
UNREACHABLE = "bus unreachable: Redis at"


class Terminal(io.StringIO):
    """Typed answers on what the command takes for a terminal."""

    def isatty(self) -> bool:
        return True


def _env(redis_url: str | None = None) -> dict[str, str]:
    """A bus on `redis_url` with no worker on its channel; by default a dead one."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "REDIS_URL": redis_url or f"redis://127.0.0.1:{free_port()}/0",
        "TOMORI_BUS_CHANNEL": f"tomori:test-bus:{uuid.uuid4().hex}",
    }


def _emergency_clear(
    stdin: int, env: dict[str, str], *args: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "emergency_clear", "--timeout", "1", *args],
        cwd=ROOT,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _answer_on_a_terminal(answer: str, env: dict[str, str]) -> tuple[int, str]:
    """Run the command with its stdin on a pseudo-terminal and type `answer`."""
    controller, terminal = pty.openpty()
    try:
        proc = _emergency_clear(terminal, env)
        os.close(terminal)
        os.write(controller, answer.encode())
        output, _ = proc.communicate(timeout=60)
    finally:
        os.close(controller)
    return proc.returncode, output


@pytest.mark.parametrize("answer", ["n\n", "\n", "whatever\n"])
def test_anything_but_yes_on_a_terminal_clears_nothing(
    answer: str, redis_url: str
) -> None:
    code, output = _answer_on_a_terminal(answer, _env(redis_url))
    assert code == 0, output
    assert "clears: " in output
    assert QUESTION.format(where="every live worker") in output
    assert "Emergency clear cancelled: nothing was cleared." in output
    assert SENT not in output


def test_yes_on_a_terminal_goes_on_to_the_workers(redis_url: str) -> None:
    code, output = _answer_on_a_terminal("y\n", _env(redis_url))
    assert code == 1 and SENT in output  # it sent: no worker listens here
    assert "cancelled" not in output


@pytest.mark.parametrize("how", ["--yes", "on a terminal"])
def test_under_a_dead_bus_it_says_only_the_error(how: str) -> None:
    """No plan above "nothing was sent" (read top-down it said it cleared), no question."""
    if how == "--yes":
        proc = _emergency_clear(subprocess.DEVNULL, _env(), "--yes")
        output, _ = proc.communicate(timeout=60)
        code = proc.returncode
    else:
        code, output = _answer_on_a_terminal("y\n", _env())
    assert code == 1
    [line] = output.strip().splitlines()
    assert line.startswith(f"CommandError: {UNREACHABLE}")
    assert line.endswith("nothing was sent")


def test_without_a_terminal_it_refuses_in_one_line_unless_yes() -> None:
    proc = _emergency_clear(subprocess.DEVNULL, _env())
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert output.strip().splitlines() == [
        "CommandError: the emergency clear empties every clearable cache on every "
        "live worker: pass --yes to run it without a terminal to confirm on"
    ]


@pytest.mark.django_db
def test_a_confirmed_clear_empties_the_workers_caches_and_a_refused_one_does_not(
    worker, test_cache: BoundedTTLCache[int, str]
) -> None:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    call_command("emergency_clear", stdin=Terminal("no\n"), stdout=out)
    assert "nothing was cleared" in out.getvalue()
    assert len(test_cache) == 5
    call_command("emergency_clear", stdin=Terminal("yes\n"), stdout=out)
    assert "worker w1 (shards 0, 1): removed 5 entries" in out.getvalue()
    assert len(test_cache) == 0


@pytest.mark.django_db
def test_without_a_terminal_nothing_reaches_a_worker(
    worker, test_cache: BoundedTTLCache[int, str]
) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CommandError, match="pass --yes"):
        call_command("emergency_clear", stdin=io.StringIO("y\n"), stdout=io.StringIO())
    assert len(test_cache) == 5
