"""discord.py's rate-limit buckets: idle ones swept at most once a minute."""

from __future__ import annotations

import asyncio

from discord.http import HTTPClient

from caches.core import FakeClock
from tomori.bot.client import build_client
from tomori.bot.http_buckets import SWEEP_SECONDS, throttle_bucket_sweeps
from tomori.bot.pipeline import MessagePipeline

IDLE = 301.0  # discord.py drops a bucket idle 300 s


def _idle_all(http: HTTPClient) -> None:
    for bucket in http._buckets.values():
        bucket._last_request -= IDLE


async def test_idle_buckets_are_swept_once_per_interval() -> None:
    http = HTTPClient(asyncio.get_running_loop())
    clock = FakeClock()
    assert throttle_bucket_sweeps(http, clock=clock)
    for n in range(300):
        http.get_ratelimit(f"channel:{n}")  # the first one walked (nothing to drop)
    _idle_all(http)
    clock.advance(SWEEP_SECONDS - 1)
    http.get_ratelimit("channel:new-1")  # within the interval: no walk
    assert len(http._buckets) == 301

    clock.advance(1)
    http.get_ratelimit("channel:new-2")  # the interval is over: the idle ones go
    assert sorted(http._buckets) == ["channel:new-1", "channel:new-2"]

    for n in range(300):
        http.get_ratelimit(f"channel:{n}")
    _idle_all(http)
    http.get_ratelimit("channel:new-3")  # the next walk waits its interval again
    assert len(http._buckets) == 303
    clock.advance(SWEEP_SECONDS)
    http.get_ratelimit("channel:new-4")
    assert sorted(http._buckets) == ["channel:new-3", "channel:new-4"]
    await http.close()


async def test_without_the_throttle_every_new_bucket_walks_them_all() -> None:
    """The behaviour the throttle changes: discord.py's own sweep, at every new bucket."""
    http = HTTPClient(asyncio.get_running_loop())
    walks = 0
    sweep = http._try_clear_expired_ratelimits

    def counted() -> None:
        nonlocal walks
        walks += 1
        sweep()

    http._try_clear_expired_ratelimits = counted  # type: ignore[method-assign]
    for n in range(300):
        http.get_ratelimit(f"channel:{n}")
    assert walks == 300
    await http.close()


def test_the_bots_client_throttles_its_sweeps() -> None:
    client = build_client(pipeline=MessagePipeline())
    sweep = client.http._try_clear_expired_ratelimits
    assert getattr(sweep, "__qualname__", "").startswith("throttle_bucket_sweeps")


def test_a_discord_py_without_the_sweep_is_left_alone(caplog) -> None:  # type: ignore[no-untyped-def]
    class Other:
        pass

    assert not throttle_bucket_sweeps(Other())
    assert "no rate-limit bucket sweep" in caplog.text
