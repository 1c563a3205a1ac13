"""SIGTERM during a burst far above the worker's capacity: a rolling restart loses nothing it acknowledged.

The real `manage.py runbot` on PostgreSQL and a Redis of its own, fed by
the simulated Discord in its own process at 2,000 messages a second (the
worker resolves a few hundred), with a small intake so the queue is full
within a second. At SIGTERM the intake closes (the waiting messages are
dropped, one line), the running turns end, every short-term memory write of
every turn that ran is stored, and no reply meets a closed HTTP session.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from tests.support.faults import OwnRedis
from tests.tomori.bot.worker.conftest import BotProcess, simulator_process
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.bot.worker import WATCHDOG_GRACE_SECONDS
from tomori.domain.models import Server, ShortTermMemoryRecord

BURST = 2000  # messages a second
TIMEOUT = 15  # WORKER_SHUTDOWN_TIMEOUT_SECONDS (the default)
ENV = {
    "PIPELINE_WORKERS": "16",
    "PIPELINE_MAX_WAITING": "300",
    "WORKER_SHUTDOWN_TIMEOUT_SECONDS": str(TIMEOUT),
}


def _numbers(line: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, line)
    assert found is not None, line
    return tuple(int(n) for n in found.groups())


def _stored_turns(scope: str) -> int:
    rows = ShortTermMemoryRecord.objects.filter(scope=scope)
    return sum(rows.values_list("turn_count", flat=True))


@pytest.mark.django_db(transaction=True)
def test_sigterm_in_a_burst_stops_intake_drops_the_waiting_and_stores_every_turn(
    run_bot: type[BotProcess], own_redis: OwnRedis
) -> None:
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)  # every turn is answered
    with simulator_process("small", traffic=BURST) as url:
        bot = run_bot(
            "--simulate", "--fake-openrouter", "--simulator-url", url,
            env={**ENV, "REDIS_URL": own_redis.url},
        )  # fmt: skip
        bot.wait_for("bot ready")
        bot.wait_for("message(s) shed so far")  # the queue is full: far above capacity
        signalled = time.monotonic()
        bot.proc.send_signal(signal.SIGTERM)
        code = bot.wait_exit(timeout=TIMEOUT + 2 * WATCHDOG_GRACE_SECONDS)
        took = time.monotonic() - signalled
    output = bot.output
    assert code == 0, output[-4000:]
    assert took < TIMEOUT + WATCHDOG_GRACE_SECONDS, output[-4000:]

    # Intake stops at once: what waited is dropped in one line, no turn starts.
    closed = [line for line in bot.lines if "shutdown: intake closed" in line]
    assert len(closed) == 1, output[-4000:]
    waiting, running = _numbers(
        closed[0], r"(\d+) waiting message\(s\) dropped.*; (\d+) turn\(s\) running"
    )
    assert waiting > 0 and running <= int(ENV["PIPELINE_WORKERS"])
    ended = bot.wait_for("the running turns ended")
    finished, cancelled = _numbers(ended, r"(\d+) finished, (\d+) cancelled")
    assert finished + cancelled == running  # every turn that ended had started

    # Every short-term memory write of every turn that ran is in the table.
    assert "not stored at shutdown" not in output
    bot.wait_for("short-term memory: every durable write is stored")
    resolved = bot.wait_for("turns resolved")
    ok = _numbers(resolved, r"'ok': (\d+)")[0]
    dm = _numbers(resolved, r"'dm': (\d+)")[0] if "'dm'" in resolved else 0
    assert ok > 0
    assert (_stored_turns("user"), _stored_turns("server")) == (ok + dm, ok)

    # The HTTP session outlived every reply.
    assert "Session is closed" not in output
    assert re.search(r"replies: \d+ sent, 0 failed", resolved), resolved
    assert "Traceback" not in output, output[-4000:]
