"""What the simulated Discord counted and received, for tests and the demo."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimStats:
    """Running counters of gateway and REST traffic."""

    connections: int = 0
    identifies: int = 0
    resumes: int = 0
    invalid_sessions: int = 0
    heartbeats: int = 0
    events_dispatched: int = 0
    # Events with no live connection (kept for a RESUME) or no owning shard.
    events_undelivered: int = 0
    # Events the connection's intents do not cover, dropped as Discord does.
    events_filtered: int = 0
    messages_dispatched: int = 0
    chunk_requests: int = 0
    chunks_sent: int = 0
    rest_requests: int = 0
    rest_messages: int = 0
    webhook_executions: int = 0
    unknown_routes: int = 0
    ops_received: Counter[int] = field(default_factory=Counter)
    events_by_type: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class SentMessage:
    """A message the bot sent: through REST ("rest") or a webhook ("webhook")."""

    via: str
    message_id: int
    channel_id: int
    guild_id: int | None
    content: str
    payload: dict[str, Any]
    webhook_id: int | None = None


@dataclass(frozen=True)
class UnknownRoute:
    """A REST request the simulator has no handler for (answered 404)."""

    method: str
    path: str
