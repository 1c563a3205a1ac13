"""emergency_clear asks first: on a terminal it waits for a yes, without one it refuses."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from caches.core import BoundedTTLCache
from tests.support.faults import free_port
from tomori.management.commands.emergency_clear import QUESTION

ROOT = Path(__file__).resolve().parents[3]
UNREACHABLE = "bus unreachable"  # what a command that went on to send says here


class Terminal(io.StringIO):
    """Typed answers on what the command takes for a terminal."""

    def isatty(self) -> bool:
        return True


def _env() -> dict[str, str]:
    # A Redis nobody listens on: a command that sends anything fails on it.
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }


def _emergency_clear(stdin: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "emergency_clear", "--timeout", "1"],
        cwd=ROOT,
        env=_env(),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _answer_on_a_terminal(answer: str) -> tuple[int, str]:
    """Run the command with its stdin on a pseudo-terminal and type `answer`."""
    controller, terminal = pty.openpty()
    try:
        proc = _emergency_clear(terminal)
        os.close(terminal)
        os.write(controller, answer.encode())
        output, _ = proc.communicate(timeout=60)
    finally:
        os.close(controller)
    return proc.returncode, output


@pytest.mark.parametrize("answer", ["n\n", "\n", "whatever\n"])
def test_anything_but_yes_on_a_terminal_clears_nothing(answer: str) -> None:
    code, output = _answer_on_a_terminal(answer)
    assert code == 0, output
    assert "clears: " in output
    assert QUESTION.format(where="every live worker") in output
    assert "Emergency clear cancelled: nothing was cleared." in output
    assert UNREACHABLE not in output


def test_yes_on_a_terminal_goes_on_to_the_workers() -> None:
    code, output = _answer_on_a_terminal("y\n")
    assert code == 1 and UNREACHABLE in output  # it sent: no Redis here
    assert "cancelled" not in output


def test_without_a_terminal_it_refuses_in_one_line_unless_yes() -> None:
    proc = _emergency_clear(subprocess.DEVNULL)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert output.strip().splitlines()[-1] == (
        "CommandError: the emergency clear empties every clearable cache on every "
        "live worker: pass --yes to run it without a terminal to confirm on"
    )
    assert UNREACHABLE not in output and "Traceback" not in output


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
