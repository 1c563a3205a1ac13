"""Point an unmodified discord.py at a SimulatedDiscord (or any base/gateway URL).

Outside the simulator package, so a worker connecting to a simulated Discord
of another process (`runbot --simulator-url`) does not import the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import discord.gateway
import discord.http
import yarl


class HasUrls(Protocol):
    """Anything with the two URLs discord.py needs (a SimulatedDiscord does)."""

    @property
    def base_url(self) -> str: ...

    @property
    def gateway_url(self) -> str: ...


Target = HasUrls | tuple[str, str]


def _urls(target: Target) -> tuple[str, str]:
    if isinstance(target, tuple):
        return target
    return target.base_url, target.gateway_url


def simulator_urls(url: str) -> tuple[str, str]:
    """Return (REST base, gateway URL) of a SimulatedDiscord served at http://host:port."""
    parsed = yarl.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{url!r}: expected http://host:port of a simulated Discord")
    root = parsed.with_path("/").with_query(None).with_fragment(None)
    ws = root.with_scheme("wss" if parsed.scheme == "https" else "ws")
    return str(root / "api" / "v10"), str(ws / "gateway")


def point_discord_at(target: Target) -> None:
    """Send discord.py's REST and gateway traffic to target, process-wide.

    Sets discord.http.Route.BASE (REST, webhooks included) and
    DiscordWebSocket.DEFAULT_GATEWAY (used by a plain Client, and by an
    AutoShardedClient after an INVALID_SESSION).
    """
    base_url, gateway_url = _urls(target)
    discord.http.Route.BASE = base_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url)


@contextmanager
def pointed_at(target: Target) -> Iterator[None]:
    """Point discord.py at target for the block, then restore the real URLs."""
    saved = (
        discord.http.Route.BASE,
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY,
    )
    point_discord_at(target)
    try:
        yield
    finally:
        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = (
            saved
        )
