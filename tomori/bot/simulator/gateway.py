"""One gateway websocket: HELLO, heartbeats, IDENTIFY, RESUME and member chunks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from tomori.bot.simulator.event_payloads import guild_create_payload, ready_payload
from tomori.bot.simulator.intents import GUILD_PRESENCES
from tomori.bot.simulator.payloads import Payload, member_payload, presence_payload
from tomori.bot.simulator.records import SimStats
from tomori.bot.simulator.world import SimGuild, SimMember, World

logger = logging.getLogger(__name__)

OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_PRESENCE_UPDATE = 3
OP_VOICE_STATE_UPDATE = 4
OP_RESUME = 6
OP_RECONNECT = 7
OP_REQUEST_GUILD_MEMBERS = 8
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11

HEARTBEAT_INTERVAL_MS = 41_250
#: Discord acknowledges a heartbeat after a network round trip. An ACK sent
#: at once can reach discord.py before its keep-alive thread has noted the
#: send time, which it then reports as "Can't keep up ... 41.3s behind".
HEARTBEAT_ACK_DELAY_SECONDS = 0.05
CHUNK_SIZE = 1000
BACKLOG_LIMIT = 10_000
_TRACE = ['["simulated-gateway",{"micros":0}]']


@dataclass(eq=False)
class Session:
    """One identified shard: its guilds, intents, sequence and missed events."""

    id: str
    shard_id: int
    shard_count: int
    sharded: bool
    intents: int
    large_threshold: int
    guild_ids: set[int] = field(default_factory=set)
    seq: int = 0
    connection: GatewayConnection | None = None
    # Events dispatched while disconnected, replayed on RESUME.
    backlog: deque[tuple[str, Payload]] = field(
        default_factory=lambda: deque(maxlen=BACKLOG_LIMIT)
    )

    @property
    def live(self) -> bool:
        """Return whether a connection currently carries this session."""
        return self.connection is not None and not self.connection.closed


class Hub(Protocol):
    """What a connection uses of its hub (``tomori.bot.simulator.hub.GatewayHub``)."""

    world: World
    stats: SimStats
    sessions: dict[str, Session]
    voice_requests: list[dict[str, Any]]
    heartbeat_interval_ms: int
    heartbeat_ack_delay: float

    @property
    def gateway_url(self) -> str:
        """Return the URL discord.py resumes on."""

    def open_session(self, identify: dict[str, Any]) -> Session:
        """Return a new session for an IDENTIFY payload."""

    def route(self, guild_id: int, session: Session) -> None:
        """Send the guild's events to ``session``."""

    async def on_identified(self, session: Session) -> None:
        """Note that ``session`` has identified."""

    def on_bot_presence(self, data: dict[str, Any] | None) -> None:
        """Record the bot's presence update."""


class GatewayConnection:
    """One websocket: HELLO, heartbeats, IDENTIFY/RESUME and member requests."""

    def __init__(self, hub: Hub, ws: web.WebSocketResponse):
        self.hub = hub
        self.ws = ws
        self.session: Session | None = None
        self._lock = asyncio.Lock()
        self._acks: set[asyncio.Task[None]] = set()

    @property
    def closed(self) -> bool:
        """Return whether the websocket is closed or closing."""
        return self.ws.closed

    async def serve(self) -> None:
        """Say HELLO, then answer frames until the client goes away."""
        await self._send(
            {
                "op": OP_HELLO,
                "d": {
                    "heartbeat_interval": self.hub.heartbeat_interval_ms,
                    "_trace": _TRACE,
                },
            }
        )
        async for message in self.ws:
            if message.type is WSMsgType.TEXT:
                await self._on_frame(json.loads(message.data))
        if self.session is not None and self.session.connection is self:
            self.session.connection = None

    async def _on_frame(self, frame: dict[str, Any]) -> None:
        op = int(frame.get("op", -1))
        self.hub.stats.ops_received[op] += 1
        handlers: dict[int, Callable[[Any], Any]] = {
            OP_HEARTBEAT: self._on_heartbeat,
            OP_IDENTIFY: self._on_identify,
            OP_RESUME: self._on_resume,
            OP_REQUEST_GUILD_MEMBERS: self._on_request_members,
            OP_PRESENCE_UPDATE: self.hub.on_bot_presence,
            OP_VOICE_STATE_UPDATE: self.hub.voice_requests.append,
        }
        handler = handlers.get(op)
        if handler is None:
            logger.debug("simulated gateway ignores op %s", op)
            return
        result = handler(frame.get("d"))
        if asyncio.iscoroutine(result):
            await result

    async def _on_heartbeat(self, _: Any) -> None:
        self.hub.stats.heartbeats += 1
        task = asyncio.ensure_future(self._ack_later())
        self._acks.add(task)  # a task nobody references may be collected
        task.add_done_callback(self._acks.discard)

    async def _ack_later(self) -> None:
        await asyncio.sleep(self.hub.heartbeat_ack_delay)
        if not self.closed:
            await self.send_op(OP_HEARTBEAT_ACK)

    async def _on_identify(self, data: dict[str, Any]) -> None:
        if self.session is not None:
            await self.ws.close(code=4005, message=b"Already authenticated")
            return
        session = self.hub.open_session(data)
        self._attach(session)
        world = self.hub.world
        guilds = world.guilds_for_shard(session.shard_id, session.shard_count)
        ready = ready_payload(
            world,
            [g.id for g in guilds],
            session_id=session.id,
            resume_gateway_url=self.hub.gateway_url,
            shard=[session.shard_id, session.shard_count] if session.sharded else None,
        )
        async with self._lock:
            await self._dispatch_locked("READY", ready)
            for guild in guilds:
                await self._send_guild_create(session, guild)
        await self.hub.on_identified(session)

    async def _send_guild_create(self, session: Session, guild: SimGuild) -> None:
        payload = guild_create_payload(
            self.hub.world,
            guild,
            intents=session.intents,
            large_threshold=session.large_threshold,
        )
        await self._dispatch_locked("GUILD_CREATE", payload)
        # Routed only now, so no event for a guild overtakes its GUILD_CREATE.
        self.hub.route(guild.id, session)

    async def _on_resume(self, data: dict[str, Any]) -> None:
        session = self.hub.sessions.get(str(data.get("session_id")))
        if session is None or (session.live and session.connection is not self):
            self.hub.stats.invalid_sessions += 1
            await self._send({"op": OP_INVALID_SESSION, "d": False})
            return
        self._attach(session)
        async with self._lock:
            while session.backlog:
                await self._dispatch_locked(*session.backlog.popleft())
            await self._dispatch_locked("RESUMED", {"_trace": _TRACE})
        self.hub.stats.resumes += 1

    def _attach(self, session: Session) -> None:
        self.session = session
        session.connection = self

    async def _on_request_members(self, data: dict[str, Any]) -> None:
        session = self.session
        if session is None:
            return
        raw_ids = data.get("guild_id") or []
        for raw_id in raw_ids if isinstance(raw_ids, list) else [raw_ids]:
            guild = self.hub.world.guilds.get(int(raw_id))
            if guild is not None and guild.id in session.guild_ids:
                self.hub.stats.chunk_requests += 1
                await self._send_chunks(session, guild, data)

    async def _send_chunks(
        self, session: Session, guild: SimGuild, request: dict[str, Any]
    ) -> None:
        members, not_found = select_members(guild, request)
        presences = bool(request.get("presences")) and bool(
            session.intents & GUILD_PRESENCES
        )
        chunks = [
            members[i : i + CHUNK_SIZE] for i in range(0, len(members), CHUNK_SIZE)
        ]
        chunks = chunks or [[]]
        for index, chunk in enumerate(chunks):
            payload: Payload = {
                "guild_id": str(guild.id),
                "members": [member_payload(m) for m in chunk],
                "chunk_index": index,
                "chunk_count": len(chunks),
                "not_found": [str(x) for x in not_found] if index == 0 else [],
            }
            if request.get("nonce"):
                payload["nonce"] = request["nonce"]
            if presences:
                payload["presences"] = [
                    presence_payload(m.user) for m in chunk if m.user.online
                ]
            await self.send_dispatch("GUILD_MEMBERS_CHUNK", payload)
            self.hub.stats.chunks_sent += 1

    async def send_dispatch(self, event: str, data: Payload) -> bool:
        """Send one event on this connection; return whether it went out."""
        async with self._lock:
            return await self._dispatch_locked(event, data)

    async def send_op(self, op: int, data: Any = None) -> bool:
        """Send a non-dispatch frame (such as RECONNECT)."""
        async with self._lock:
            return await self._send({"op": op, "d": data})

    async def _dispatch_locked(self, event: str, data: Payload) -> bool:
        session = self.session
        assert session is not None
        session.seq += 1
        sent = await self._send(
            {"op": OP_DISPATCH, "t": event, "s": session.seq, "d": data}
        )
        if sent:
            self.hub.stats.events_dispatched += 1
            self.hub.stats.events_by_type[event] += 1
        return sent

    async def _send(self, frame: dict[str, Any]) -> bool:
        if self.ws.closed:
            return False
        try:
            await self.ws.send_str(json.dumps(frame, separators=(",", ":")))
        except (ConnectionError, RuntimeError):
            return False
        return True


def select_members(
    guild: SimGuild, request: dict[str, Any]
) -> tuple[list[SimMember], list[int]]:
    """Return the members an op 8 request asks for, and the user ids not found."""
    user_ids = request.get("user_ids")
    if user_ids:
        wanted = [
            int(x) for x in (user_ids if isinstance(user_ids, list) else [user_ids])
        ]
        found = [guild.members[u] for u in wanted if u in guild.members]
        return found, [u for u in wanted if u not in guild.members]
    query = (request.get("query") or "").lower()
    limit = int(request.get("limit") or 0)
    members = [
        m
        for m in guild.members.values()
        if m.user.username.startswith(query)
        or (m.nick is not None and m.nick.lower().startswith(query))
    ]
    return (members[:limit] if limit else members), []
