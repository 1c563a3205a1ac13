"""One client per shard: the shard lock survives Redis restarts and outages, or stops."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from datetime import datetime

import pytest
import redis

from tests.support.faults import OwnRedis, free_port
from tests.tomori.bot.worker.conftest import BotProcess
from tomori.bot.lock import (
    LockState,
    LockTiming,
    ShardLock,
    ShardLockError,
    Verdict,
    lock_names,
)

SIM = ("--simulate", "--fake-openrouter", "--shard-ids", "0", "--shard-count", "2")


@pytest.fixture
def lock_redis(settings, own_redis: OwnRedis) -> redis.Redis:  # type: ignore[no-untyped-def]
    """Point the lock at the test's own Redis under a fresh namespace."""
    settings.REDIS_URL = own_redis.url
    settings.TOMORI_BUS_CHANNEL = f"tomori:test-lock:{uuid.uuid4().hex}"
    return redis.Redis.from_url(own_redis.url)


def _key(settings, name: str) -> str:  # type: ignore[no-untyped-def]
    return f"{settings.TOMORI_BUS_CHANNEL}:lock:{name}"


def test_renewal_takes_back_a_lock_that_a_redis_restart_dropped(
    settings, lock_redis: redis.Redis, own_redis: OwnRedis
) -> None:  # type: ignore[no-untyped-def]
    key = _key(settings, "runbot-shard-0")
    lock = ShardLock(lock_names([0]), owner="a", timing=LockTiming(ttl=30))
    lock.acquire()
    try:
        own_redis.restart()
        assert lock_redis.get(key) is None
        assert [r.state for r in lock.renew()] == [LockState.RETAKEN]
        assert lock_redis.get(key) == lock.locks[0].value.encode()
        assert 0 < lock_redis.pttl(key) <= 30_000
        assert [r.state for r in lock.renew()] == [LockState.HELD]
        with pytest.raises(
            ShardLockError, match=r"runbot-shard-0 \(Redis key .*worker a "
        ):
            ShardLock(lock_names([0]), owner="b").acquire()
    finally:
        lock.release()
    assert lock_redis.get(key) is None


def test_a_lock_taken_by_another_worker_after_a_restart_stops_serving(
    settings, lock_redis: redis.Redis, own_redis: OwnRedis
) -> None:  # type: ignore[no-untyped-def]
    key = _key(settings, "runbot-shard-3")
    lock = ShardLock(lock_names([3]), owner="a")
    lock.acquire()
    own_redis.restart()
    other = ShardLock(lock_names([3]), owner="intruder")
    other.acquire()
    try:
        [renewal] = lock.renew()
        assert renewal.state is LockState.TAKEN
        verdict = lock.keep()
        assert not verdict.serving
        assert "lost the shard lock runbot-shard-3" in verdict.reason
        assert f"Redis key {key}" in verdict.reason
        assert f"worker intruder (pid {os.getpid()} on " in verdict.reason
        lock.release()  # compares the exact value: the intruder's key stays
        assert lock_redis.get(key) == other.locks[0].value.encode()
    finally:
        other.release()


def test_an_unreachable_redis_is_not_a_lost_lock_until_a_whole_ttl_has_passed(
    lock_redis: redis.Redis, own_redis: OwnRedis, fake_clock
) -> None:  # type: ignore[no-untyped-def]
    timing = LockTiming(ttl=6)
    lock = ShardLock(lock_names([1]), owner="a", timing=timing, clock=fake_clock)
    lock.acquire()
    assert lock.keep() == Verdict(True, timing.renew_every)
    own_redis.kill()
    fake_clock.advance(2)
    assert lock.keep().next_in == timing.retry_every  # retried sooner
    fake_clock.advance(3.9)  # 5.9 s since the last renewal: may still be ours
    assert lock.keep().serving
    own_redis.start()
    assert lock.keep() == Verdict(True, timing.renew_every)  # taken back
    own_redis.kill()
    fake_clock.advance(5.9)
    assert lock.keep().serving
    fake_clock.advance(0.1)
    verdict = lock.keep()
    assert not verdict.serving
    assert "Redis unreachable for 6.0s, longer than the lock's TTL" in verdict.reason
    lock.release()


def test_a_newly_taken_redis_lock_connects_half_a_ttl_later(
    lock_redis: redis.Redis, fake_clock, settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    lock = ShardLock(lock_names([2]), timing=LockTiming(ttl=8), clock=fake_clock)
    lock.acquire()
    assert lock.connect_at == fake_clock() + 4
    lock.release()
    settings.REDIS_URL = ""  # the kernel's flock cannot be lost: no wait
    settings.VAR_DIR = tmp_path
    file_lock = ShardLock(lock_names([2]), clock=fake_clock)
    file_lock.acquire()
    assert file_lock.connect_at == fake_clock()
    file_lock.release()


# Real runbot processes on one shard against the test's own Redis.


def _env(own_redis: OwnRedis, channel: str, worker: str, ttl: int) -> dict[str, str]:
    return {
        "REDIS_URL": own_redis.url,
        "TOMORI_BUS_CHANNEL": channel,
        "TOMORI_WORKER_ID": worker,
        "SHARD_LOCK_TTL_SECONDS": str(ttl),
    }


def _logged_at(line: str) -> datetime:
    """Return the time of a log line (both processes share this machine's clock)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_after_a_redis_restart_the_worker_keeps_its_shard_and_a_second_is_refused(
    run_bot: type[BotProcess], own_redis: OwnRedis
) -> None:
    channel = f"tomori:test-lock:{uuid.uuid4().hex}"
    first = run_bot(*SIM, env=_env(own_redis, channel, "a", ttl=4))
    first.wait_for("bot ready")
    own_redis.restart()
    first.wait_for("took it back")
    second = run_bot(*SIM, env=_env(own_redis, channel, "b", ttl=4))
    assert second.wait_exit() != 0
    refusal = [line for line in second.lines if line.startswith("CommandError")]
    assert refusal == [
        f"CommandError: another runbot already holds runbot-shard-0 (Redis key "
        f"{channel}:lock:runbot-shard-0): worker a:shard0 (pid {first.proc.pid} on "
        f"{socket.gethostname()}); stop it first, or run with --wait-for-lock\n"
    ]
    assert "Traceback" not in second.output
    assert "simulated Discord at" not in second.output
    assert first.proc.poll() is None, first.output[-3000:]


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_worker_that_lost_its_lock_closes_its_gateway_before_the_new_holder_connects(
    run_bot: type[BotProcess], own_redis: OwnRedis
) -> None:
    channel = f"tomori:test-lock:{uuid.uuid4().hex}"
    first = run_bot(*SIM, env=_env(own_redis, channel, "a", ttl=10))
    first.wait_for("bot ready")
    first.proc.send_signal(signal.SIGSTOP)  # frozen: it cannot renew or retake
    try:
        own_redis.restart()
        second = run_bot(*SIM, env=_env(own_redis, channel, "b", ttl=10))
        second.wait_for("took the shard lock")
    finally:
        first.proc.send_signal(signal.SIGCONT)
    assert first.wait_exit() != 0
    lost = first.wait_for("ERROR tomori.bot.worker: lost the shard lock runbot-shard-0")
    assert f"(Redis key {channel}:lock:runbot-shard-0)" in lost
    assert f"held by worker b:shard0 (pid {second.proc.pid} on " in lost
    closed = first.wait_for("gateway closed: the shard lock is lost")
    assert "CommandError: lost the shard lock runbot-shard-0" in first.output
    assert "Traceback" not in first.output
    connected = second.wait_for("simulated Discord at")
    second.wait_for("bot ready")
    assert _logged_at(closed) < _logged_at(connected)
    assert second.proc.poll() is None


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_worker_serves_through_a_short_redis_outage_and_stops_after_a_whole_ttl(
    run_bot: type[BotProcess], own_redis: OwnRedis
) -> None:
    channel = f"tomori:test-lock:{uuid.uuid4().hex}"
    bot = run_bot(*SIM, env=_env(own_redis, channel, "a", ttl=6))
    bot.wait_for("bot ready")
    own_redis.kill()
    bot.wait_for("could not renew the shard lock")
    own_redis.start()
    bot.wait_for("shard lock renewed again after")
    assert bot.proc.poll() is None
    own_redis.kill()
    assert bot.wait_exit(timeout=30) != 0
    lost = bot.wait_for("ERROR tomori.bot.worker: lost the shard lock runbot-shard-0")
    elapsed = float(lost.split("Redis unreachable for ")[1].split("s,")[0])
    assert 6 <= elapsed < 9
    bot.wait_for("gateway closed: the shard lock is lost")
    assert "Traceback" not in bot.output


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_wait_for_lock_connects_only_once_the_holder_has_left(
    run_bot: type[BotProcess], own_redis: OwnRedis
) -> None:
    channel = f"tomori:test-lock:{uuid.uuid4().hex}"
    first = run_bot(*SIM, env=_env(own_redis, channel, "a", ttl=4))
    first.wait_for("bot ready")
    second = run_bot(*SIM, "--wait-for-lock", env=_env(own_redis, channel, "b", ttl=4))
    assert "worker a:shard0" in second.wait_for("waiting for the shard lock")
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait_exit() == 0
    stopped = first.wait_for("worker a:shard0 stopped")
    connected = second.wait_for("simulated Discord at")
    second.wait_for("bot ready")
    assert _logged_at(stopped) < _logged_at(connected)


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_second_embedded_worker_on_a_file_locked_shard_refuses_in_one_line(
    run_bot: type[BotProcess],
) -> None:
    port = str(free_port())
    args = (
        *("--simulate", "--fake-openrouter", "--serve-admin", "--admin-port", port),
        *("--shard-ids", "987", "--shard-count", "988"),  # no clash with `make run`
    )
    env = {"REDIS_URL": "", "TOMORI_WORKER_ID": "a"}
    first = run_bot(*args, env=env)
    first.wait_for("bot ready")
    second = run_bot(*args, env={**env, "TOMORI_WORKER_ID": "b"})
    assert second.wait_exit() != 0
    # The held shard is reported, not the admin port the first one serves on.
    refusal = [line for line in second.lines if line.startswith("CommandError")]
    assert len(refusal) == 1
    assert "another runbot already holds runbot-shard-987 (file " in refusal[0]
    assert f"worker a:shard987 (pid {first.proc.pid} on " in refusal[0]
    assert "Traceback" not in second.output
    assert "simulated Discord at" not in second.output
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait_exit() == 0


@pytest.mark.e2e
def test_runbot_refuses_in_one_line_when_redis_cannot_say_who_holds_the_shard(
    run_bot: type[BotProcess], own_redis: OwnRedis
) -> None:
    own_redis.kill()
    bot = run_bot(*SIM, env=_env(own_redis, "tomori:test-lock:down", "a", ttl=4))
    assert bot.wait_exit() != 0
    refusal = [line for line in bot.lines if line.startswith("CommandError")]
    assert len(refusal) == 1
    assert (
        "cannot take the shard lock runbot-shard-0: Redis is unreachable"
        in (refusal[0])
    )
    assert "Traceback" not in bot.output
