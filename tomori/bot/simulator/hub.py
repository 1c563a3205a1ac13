"""The gateway hub: every connection and session, and which shard owns each guild."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tomori.bot.simulator.gateway import (
    HEARTBEAT_ACK_DELAY_SECONDS,
    HEARTBEAT_INTERVAL_MS,
    OP_RECONNECT,
    GatewayConnection,
    Session,
)
from tomori.bot.simulator.intents import ALL_INTENTS, MESSAGE_CONTENT, allows
from tomori.bot.simulator.payloads import Payload
from tomori.bot.simulator.records import SimStats
from tomori.bot.simulator.world import World


class GatewayHub:
    """Every gateway connection and session, and which session owns each guild."""

    def __init__(self, world: World, stats: SimStats, gateway_url: Callable[[], str]):
        self.world = world
        self.stats = stats
        self._gateway_url = gateway_url
        self.sessions: dict[str, Session] = {}
        self.connections: set[GatewayConnection] = set()
        self.voice_requests: list[dict[str, Any]] = []
        self.all_shards_ready = asyncio.Event()
        self._routes: dict[int, Session] = {}
        self._identified = asyncio.Condition()
        self.heartbeat_interval_ms = HEARTBEAT_INTERVAL_MS
        self.heartbeat_ack_delay = HEARTBEAT_ACK_DELAY_SECONDS

    @property
    def gateway_url(self) -> str:
        """Return the websocket URL clients should resume at."""
        return self._gateway_url()

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        """Serve one gateway websocket (the aiohttp handler for /gateway)."""
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        connection = GatewayConnection(self, ws)
        self.connections.add(connection)
        self.stats.connections += 1
        try:
            await connection.serve()
        finally:
            self.connections.discard(connection)
        return ws

    def open_session(self, identify: dict[str, Any]) -> Session:
        """Start a session for an IDENTIFY, retiring stale ones for that shard."""
        shard = identify.get("shard")
        shard_id, shard_count = (int(shard[0]), int(shard[1])) if shard else (0, 1)
        for old in [s for s in self.sessions.values() if not s.live]:
            if (old.shard_id, old.shard_count) == (shard_id, shard_count):
                del self.sessions[old.id]
        session = Session(
            id=uuid.uuid4().hex,
            shard_id=shard_id,
            shard_count=shard_count,
            sharded=shard is not None,
            intents=int(identify.get("intents", ALL_INTENTS)),
            large_threshold=int(identify.get("large_threshold", 50)),
        )
        self.sessions[session.id] = session
        return session

    def route(self, guild_id: int, session: Session) -> None:
        """Send a guild's later events to this session."""
        self._routes[guild_id] = session
        session.guild_ids.add(guild_id)

    def session_for(self, guild_id: int) -> Session | None:
        """Return the session that owns a guild, or None."""
        return self._routes.get(guild_id)

    async def on_identified(self, session: Session) -> None:
        """Count an identify and wake waiters once every shard is in."""
        self.stats.identifies += 1
        shards = {
            s.shard_id
            for s in self.sessions.values()
            if s.shard_count == session.shard_count and s.live
        }
        if len(shards) >= session.shard_count:
            self.all_shards_ready.set()
        async with self._identified:
            self._identified.notify_all()

    async def wait_for_identify(self, count: int = 1) -> None:
        """Wait until count IDENTIFYs have been answered with all their guilds."""
        async with self._identified:
            await self._identified.wait_for(lambda: self.stats.identifies >= count)

    def on_bot_presence(self, data: dict[str, Any] | None) -> None:
        """Record the bot's own presence change (op 3)."""
        if data and data.get("status"):
            self.world.bot_user.status = str(data["status"])

    async def dispatch(self, guild_id: int, event: str, data: Payload) -> bool:
        """Send a guild event to its shard; return whether it was delivered now."""
        session = self._routes.get(guild_id)
        if session is None:
            self.stats.events_undelivered += 1
            return False
        if not allows(session.intents, event):
            self.stats.events_filtered += 1
            return False
        data = _without_content(session, event, data, self.world.bot_user.id)
        if not session.live:
            session.backlog.append((event, data))
            self.stats.events_undelivered += 1
            return False
        assert session.connection is not None
        return await session.connection.send_dispatch(event, data)

    async def send_reconnect(self, shard_id: int | None = None) -> int:
        """Ask live connections (or one shard's) to reconnect; return how many."""
        targets = [
            c
            for c in list(self.connections)
            if c.session is not None
            and c.session.connection is c
            and shard_id in (None, c.session.shard_id)
        ]
        for connection in targets:
            await connection.send_op(OP_RECONNECT)
            # Later events wait in the session's backlog for the RESUME, as
            # Discord replays them, instead of dying with the old socket.
            assert connection.session is not None
            connection.session.connection = None
        return len(targets)

    async def close_all(self, code: int = 1001) -> None:
        """Close every connection (at shutdown)."""
        for connection in list(self.connections):
            await connection.ws.close(code=code)


def _without_content(
    session: Session, event: str, data: Payload, bot_id: int
) -> Payload:
    """Blank message content without the MESSAGE_CONTENT intent, as Discord does."""
    if (
        event not in ("MESSAGE_CREATE", "MESSAGE_UPDATE")
        or session.intents & MESSAGE_CONTENT
    ):
        return data
    author_id = str((data.get("author") or {}).get("id"))
    mentioned = any(str(m.get("id")) == str(bot_id) for m in data.get("mentions", []))
    if author_id == str(bot_id) or mentioned:
        return data
    return {**data, "content": "", "embeds": [], "attachments": [], "components": []}
