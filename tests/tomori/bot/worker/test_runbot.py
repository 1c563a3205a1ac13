"""runbot as operators run it: start-up checks, libvips and heap limits, the shard lock, SIGTERM."""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import uuid

import pytest

from tests.tomori.bot.worker.conftest import ROOT, BotProcess, simulator_process
from tomori.bot.demo import seed_world
from tomori.bot.lock import LockState, ShardLock, ShardLockError, lock_names
from tomori.bot.simulator import Scenario, generate_world
from tomori.domain.models import Server, ShortTermMemoryRecord

SIM = ("--simulate", "--fake-openrouter", "--traffic-rate", "400")


def test_an_invalid_setting_stops_runbot_naming_it(run_bot: type[BotProcess]) -> None:
    bot = run_bot("--duration", "1", env={"SHARP_CONCURRENCY": "lots"})
    assert bot.wait_exit() != 0
    assert "SHARP_CONCURRENCY='lots'" in bot.output


@pytest.mark.django_db(transaction=True)
def test_libvips_limits_and_the_heap_threshold_take_effect_before_anything_else(
    run_bot: type[BotProcess],
) -> None:
    env = {
        "SHARP_CONCURRENCY": "3",
        "SHARP_CACHE_ITEMS": "7",
        "SHARP_CACHE_MEMORY_MB": "5",
        "HEAP_MMAP_THRESHOLD_KB": "256",
    }
    bot = run_bot(*SIM, "--duration", "0.5", env=env)
    line = bot.wait_for("libvips limits in effect")
    assert "'concurrency': 3" in line and "'cache_items': 7" in line
    assert "'cache_memory_mb': 5.0" in line
    assert bot.wait_exit() == 0
    started = bot.output.index("simulated Discord at")
    assert bot.output.index("libvips limits") < started
    if platform.libc_ver()[0] == "glibc":  # mallopt is glibc's
        assert bot.output.index("mmap threshold fixed at 256 KiB") < started


def test_a_second_worker_on_the_same_shard_is_refused_by_the_file_lock(
    settings, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    settings.REDIS_URL = ""
    settings.VAR_DIR = tmp_path
    first = ShardLock(lock_names([0, 1]))
    first.acquire()
    try:
        with pytest.raises(ShardLockError, match="runbot-shard-1"):
            ShardLock(lock_names([1, 2])).acquire()
        other = ShardLock(lock_names([2]))  # the refused worker let go of shard 2
        other.acquire()
        other.release()
    finally:
        first.release()
    again = ShardLock(lock_names([0]))
    again.acquire()
    again.release()


def test_a_second_worker_on_the_same_shard_is_refused_by_the_redis_lock(
    settings, redis_url
) -> None:  # type: ignore[no-untyped-def]
    settings.REDIS_URL = redis_url
    settings.TOMORI_BUS_CHANNEL = f"tomori:test-lock:{uuid.uuid4().hex}"
    first = ShardLock(lock_names([5, 6]))
    first.acquire()
    try:
        with pytest.raises(ShardLockError, match="runbot-shard-6"):
            ShardLock(lock_names([6])).acquire()
        assert {r.state for r in first.renew()} == {LockState.HELD}
    finally:
        first.release()
    second = ShardLock(lock_names([6]))
    second.acquire()
    second.release()


def wait_for_a_stored_turn(bot: BotProcess, *, lines: int) -> bool:
    """Read cache_sizes lines (a second apart) until short-term memory holds a turn."""
    for _ in range(lines):
        sample = json.loads(
            bot.wait_for('"metric":"cache_sizes"', timeout=30).split(": ", 1)[1]
        )
        bot.lines.clear()
        if sample["short_term_memory"] > 0:
            return True
    return False


@pytest.mark.django_db(transaction=True)
def test_sigterm_exits_cleanly_and_flushes_durable_memory(
    run_bot: type[BotProcess],
) -> None:
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)  # every turn is answered
    bot = run_bot(*SIM, env={"CACHE_METRICS_INTERVAL_MS": "1000"})
    bot.wait_for("bot ready")
    wait_for_a_stored_turn(bot, lines=120)
    bot.proc.send_signal(signal.SIGTERM)
    assert bot.wait_exit(timeout=20) == 0
    assert "worker" in bot.wait_for("stopped")
    turns = bot.wait_for("turns resolved")
    resolved = int(turns.split("turns resolved: ")[1].split()[0])
    assert resolved > 0
    assert ShortTermMemoryRecord.objects.exists(), bot.output[-3000:]


@pytest.mark.django_db(transaction=True)
def test_the_start_up_heap_is_frozen_out_of_full_collections_once_ready(
    run_bot: type[BotProcess],
) -> None:
    bot = run_bot(*SIM, "--duration", "3")
    bot.wait_for("bot ready")
    line = bot.wait_for("start-up objects frozen out of full collections")
    frozen = int(line.split("gc: ")[1].split()[0])
    assert frozen > 10_000  # discord.py's guilds, members, channels...
    assert bot.wait_exit() == 0


@pytest.mark.django_db(transaction=True)
def test_runbot_serves_a_simulated_discord_of_another_process(
    run_bot: type[BotProcess],
) -> None:
    # The production shape of benchmarks/runbot_rss.py: the worker holds no world.
    seed_world(generate_world(Scenario.named("small")))
    Server.objects.update(channel_whitelist_enabled=False)  # every turn is answered
    with simulator_process("small", traffic=200) as url:
        bot = run_bot(
            "--simulate", "--fake-openrouter", "--simulator-url", url,
            env={"CACHE_METRICS_INTERVAL_MS": "1000"},
        )  # fmt: skip
        line = bot.wait_for("simulated Discord at")
        assert f"{url}/api/v10 (another process)" in line
        bot.wait_for("bot ready: 5 guilds")
        assert wait_for_a_stored_turn(bot, lines=60), "no turn stored from its traffic"
        bot.proc.send_signal(signal.SIGTERM)
        assert bot.wait_exit(timeout=20) == 0


def test_simulator_url_is_checked_before_start(run_bot: type[BotProcess]) -> None:
    bot = run_bot("--simulate", "--simulator-url", "ftp://nowhere")
    assert bot.wait_exit() != 0
    assert "--simulator-url 'ftp://nowhere': expected http://host:port" in bot.output
    bot = run_bot(
        "--simulate", "--simulator-url", "http://127.0.0.1:9", "--traffic-rate", "5"
    )
    assert bot.wait_exit() != 0
    assert "the simulator process sends the traffic" in bot.output


def test_pointing_discord_at_another_process_imports_no_simulator() -> None:
    probe = (
        "import sys, tomori.bot.discord_target as t; "
        "print(t.simulator_urls('http://127.0.0.1:5000')); "
        "print('tomori.bot.simulator' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    urls, imported = out.stdout.splitlines()
    assert urls == "('http://127.0.0.1:5000/api/v10', 'ws://127.0.0.1:5000/gateway')"
    assert imported == "False"
