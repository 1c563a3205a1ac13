"""discord.py's rate-limit buckets: swept once a minute, not at every new bucket.

discord.py keeps one rate-limit bucket per route and major parameter (a
reply's: its channel) and, once it holds 256, walks all of them for the ones
idle 300 s each time it makes a new one
(`HTTPClient._try_clear_expired_ratelimits`). A bot that replies in many
channels makes a new bucket on most replies, so each reply walks every
channel replied in over the last five minutes: about 2,000 buckets on the
production scenario at 150 msg/s, 1.5% of the event loop's time two minutes
after ready and growing with the reply rate times the channels. Here the
walk runs at most once per SWEEP_SECONDS: a bucket idle 300 s goes within
300 + SWEEP_SECONDS s (a few hundred bytes each) instead of at the next new
bucket.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import discord

logger = logging.getLogger(__name__)

#: Seconds between two walks of discord.py's buckets for idle ones.
SWEEP_SECONDS = 60.0


def throttle_bucket_sweeps(
    http: Any,
    *,
    every: float = SWEEP_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Make `http` (a discord.py HTTPClient) sweep its idle buckets at most every `every` s.

    Returns False, with a warning, when this discord.py has no such sweep
    (its buckets are then as that version keeps them).
    """
    sweep = getattr(http, "_try_clear_expired_ratelimits", None)
    if sweep is None:
        logger.warning(
            "discord.py %s has no rate-limit bucket sweep to throttle",
            discord.__version__,
        )
        return False
    next_at = float("-inf")

    def throttled() -> None:
        nonlocal next_at
        now = clock()
        if now < next_at:
            return
        next_at = now + every
        sweep()

    http._try_clear_expired_ratelimits = throttled
    return True
