"""SIGTERM with a backlog far above the worker's capacity: a rolling restart loses nothing it acknowledged.

The real `manage.py runbot` on PostgreSQL and a Redis of its own, fed by
the simulated Discord at 500 messages a second. The simulated Discord holds
its answers to the bot's replies, so the turn workers, each waiting on a
reply in flight, stay busy: from then on every message waits, the queue
fills and sheds, whatever the host's speed. At SIGTERM the intake closes
(the waiting messages are dropped, one line); the replies are answered
only then, so the running turns finish through an HTTP session that
outlives the gateway; every short-term memory write of every turn that ran
is stored; exit 0 within WORKER_SHUTDOWN_TIMEOUT_SECONDS.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from tests.support.faults import OwnRedis
from tests.tomori.bot.worker.conftest import BotProcess, ThreadedSimulator
from tomori.bot.demo import seed_world
from tomori.bot.simulator import Scenario, generate_world
from tomori.bot.worker import WATCHDOG_GRACE_SECONDS
from tomori.domain.models import Server, ShortTermMemoryRecord

RATE = 500  # messages a second
TIMEOUT = 15  # WORKER_SHUTDOWN_TIMEOUT_SECONDS (the default)
WORKERS, WAITING = 4, 300
ENV = {
    "PIPELINE_WORKERS": str(WORKERS),
    "PIPELINE_MAX_WAITING": str(WAITING),
    "WORKER_SHUTDOWN_TIMEOUT_SECONDS": str(TIMEOUT),
}


def _numbers(line: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, line)
    assert found is not None, line
    return tuple(int(n) for n in found.groups())


def _stored_turns(scope: str) -> int:
    rows = ShortTermMemoryRecord.objects.filter(scope=scope)
    return sum(rows.values_list("turn_count", flat=True))


def _backlogged_bot(
    run_bot: type[BotProcess], simulator: ThreadedSimulator, redis_url: str
) -> BotProcess:
    """Start runbot on `simulator`; return once its turn workers wait on held replies
    and its queue is full (a message shed after that)."""
    url = simulator.start()
    simulator.hold_replies()
    simulator.send_traffic(RATE)
    bot = run_bot(
        "--simulate", "--fake-openrouter", "--simulator-url", url,
        env={**ENV, "REDIS_URL": redis_url},
    )  # fmt: skip
    bot.wait_for("bot ready")
    assert simulator.first_held.wait(60), "no reply reached the simulated Discord"
    bot.wait_for("message(s) shed so far", after=len(bot.lines))
    return bot


@pytest.mark.django_db(transaction=True)
def test_sigterm_with_a_backlog_drops_the_waiting_finishes_the_running_stores_every_turn(
    run_bot: type[BotProcess],
    threaded_simulator: type[ThreadedSimulator],
    own_redis: OwnRedis,
) -> None:
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)  # every turn is answered
    simulator = threaded_simulator("small")
    bot = _backlogged_bot(run_bot, simulator, own_redis.url)
    signalled = time.monotonic()
    bot.proc.send_signal(signal.SIGTERM)

    # Intake stops at once: what waited is dropped in one line.
    closed = bot.wait_for("shutdown: intake closed")
    waiting, running = _numbers(
        closed, r"(\d+) waiting message\(s\) dropped.*; (\d+) turn\(s\) running"
    )
    assert waiting > 0 and 0 < running <= WORKERS, closed
    simulator.release_replies()  # the replies in flight complete now
    code = bot.wait_exit(timeout=TIMEOUT + 2 * WATCHDOG_GRACE_SECONDS)
    took = time.monotonic() - signalled
    output = bot.output
    assert code == 0, output[-4000:]
    assert took < TIMEOUT + WATCHDOG_GRACE_SECONDS, output[-4000:]
    assert len([x for x in bot.lines if "shutdown: intake closed" in x]) == 1
    ended = bot.wait_for("the running turns ended")
    finished, cancelled = _numbers(ended, r"(\d+) finished, (\d+) cancelled")
    assert (finished, cancelled) == (running, 0), ended  # no other turn started

    # Every short-term memory write of every turn that ran is in the table:
    # the turns that answered (each sent its reply) and the DMs captured.
    assert "not stored at shutdown" not in output
    bot.wait_for("short-term memory: every durable write is stored")
    resolved = bot.wait_for("turns resolved")
    dm = _numbers(resolved, r"'dm': (\d+)")[0] if "'dm'" in resolved else 0
    # The HTTP session outlived every reply: those held across the signal too.
    sent, failed = _numbers(resolved, r"replies: (\d+) sent, (\d+) failed")
    assert sent >= running > 0 and failed == 0, resolved
    assert (_stored_turns("user"), _stored_turns("server")) == (sent + dm, sent)
    assert "Session is closed" not in output
    assert "Traceback" not in output, output[-4000:]
