"""SimulatedDiscord: the gateway and REST API on loopback, plus traffic."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from types import TracebackType

from aiohttp import web

from tomori.bot.simulator.actions import GuildActions
from tomori.bot.simulator.event_payloads import (
    mention_payload,
    message_payload,
    webhook_author_payload,
)
from tomori.bot.simulator.generator import generate_world
from tomori.bot.simulator.hub import GatewayHub
from tomori.bot.simulator.payloads import (
    Payload,
    member_payload,
    user_payload,
)
from tomori.bot.simulator.records import SentMessage, SimStats, UnknownRoute
from tomori.bot.simulator.rest import RestApi
from tomori.bot.simulator.scenario import Scenario
from tomori.bot.simulator.snowflake import SnowflakeFactory
from tomori.bot.simulator.traffic import PlannedMessage, TrafficModel
from tomori.bot.simulator.world import World

logger = logging.getLogger(__name__)

#: The bot's sent messages (and unknown routes) the simulator keeps for
#: inspection, newest last: a long run must not grow without bound (counts
#: of everything are in `stats`).
RECORDS_KEPT = 1_000


class SimulatedDiscord(GuildActions):
    """A Discord gateway and REST API on 127.0.0.1 for an unmodified discord.py.

    Start it, point discord.py at base_url and gateway_url (see connect.py),
    then drive traffic with send_messages() or the GuildActions helpers.
    """

    def __init__(
        self,
        scenario: Scenario | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        echo_own_messages: bool = True,
        world: World | None = None,
    ):
        if isinstance(scenario, str):
            scenario = Scenario.named(scenario)
        self.scenario = scenario or Scenario.small()
        self.world = world or generate_world(self.scenario)
        self.host = host
        self.port = port
        # Discord echoes the bot's own REST and webhook posts as MESSAGE_CREATE.
        self.echo_own_messages = echo_own_messages
        self.stats = SimStats()
        self.sent_messages: deque[SentMessage] = deque(maxlen=RECORDS_KEPT)
        self.unknown_routes: deque[UnknownRoute] = deque(maxlen=RECORDS_KEPT)
        self.ids = SnowflakeFactory()
        self.traffic = TrafficModel(self.world, self.scenario)
        self.gateway = GatewayHub(self.world, self.stats, lambda: self.gateway_url)
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Start serving; return the bound port (an ephemeral one for port 0)."""
        rest = RestApi(self)
        app = web.Application(middlewares=[rest.count_requests])
        app.router.add_get("/gateway", self.gateway.handle)
        rest.add_routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        logger.info("simulated Discord on %s", self.base_url)
        return self.port

    async def stop(self) -> None:
        """Close every gateway connection and stop serving."""
        if self._runner is None:
            return
        await self.gateway.close_all()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> SimulatedDiscord:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """Return the REST base, the value for discord.http.Route.BASE."""
        return f"http://{self.host}:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        """Return the gateway websocket URL (without query)."""
        return f"ws://{self.host}:{self.port}/gateway"

    @property
    def bot_user_id(self) -> int:
        """Return the bot user's id (a member of every guild)."""
        return self.world.bot_user.id

    @property
    def all_shards_ready(self) -> asyncio.Event:
        """Return the event set once every shard has identified and got its guilds."""
        return self.gateway.all_shards_ready

    async def wait_for_identify(self, count: int = 1) -> None:
        """Wait until count IDENTIFYs were answered with READY and GUILD_CREATEs."""
        await self.gateway.wait_for_identify(count)

    async def dispatch(self, guild_id: int, event: str, payload: Payload) -> bool:
        """Send an event to the shard owning a guild; return whether it went out.

        The payload goes as given (add guild_id yourself); events the shard's
        intents do not cover are dropped, as Discord drops them.
        """
        delivered = await self.gateway.dispatch(guild_id, event, payload)
        if delivered and event == "MESSAGE_CREATE":
            self.stats.messages_dispatched += 1
        return delivered

    async def echo(self, guild_id: int, message: Payload) -> None:
        """Dispatch the bot's own posted message back, when echo is on."""
        if self.echo_own_messages:
            await self.dispatch(guild_id, "MESSAGE_CREATE", message)

    async def send_reconnect(self, shard_id: int | None = None) -> int:
        """Send RECONNECT (op 7) to every shard or one; return connections asked."""
        return await self.gateway.send_reconnect(shard_id)

    async def send_messages(self, count: int) -> int:
        """Dispatch count scenario-drawn MESSAGE_CREATEs; return how many went out."""
        delivered = 0
        for _ in range(count):
            delivered += await self.send_planned(self.traffic.next())
        return delivered

    async def send_planned(self, planned: PlannedMessage) -> bool:
        """Dispatch one planned message as its MESSAGE_CREATE."""
        return await self.dispatch(
            planned.guild.id, "MESSAGE_CREATE", self.planned_payload(planned)
        )

    def planned_payload(self, planned: PlannedMessage) -> Payload:
        """Return the MESSAGE_CREATE payload for a planned message."""
        guild = planned.guild
        if planned.webhook is not None:
            return message_payload(
                message_id=self.ids.next(),
                channel_id=planned.channel_id,
                author=webhook_author_payload(planned.webhook),
                content=planned.content,
                guild_id=guild.id,
                webhook_id=planned.webhook.id,
            )
        assert planned.author is not None
        bot_member = guild.members[self.bot_user_id]
        return message_payload(
            message_id=self.ids.next(),
            channel_id=planned.channel_id,
            author=user_payload(planned.author.user),
            content=planned.content,
            guild_id=guild.id,
            member=member_payload(planned.author, with_user=False),
            mentions=[mention_payload(bot_member)] if planned.mentions_bot else [],
        )

    async def run_traffic(
        self, rate_per_second: float | None = None, duration: float | None = None
    ) -> int:
        """Send scenario traffic at a steady rate for duration seconds (None: until
        cancelled); return how many messages went out.
        """
        rate = rate_per_second or self.scenario.message_rate
        loop = asyncio.get_running_loop()
        started = loop.time()
        attempted = delivered = 0
        while duration is None or loop.time() - started < duration:
            due = int((loop.time() - started) * rate) + 1
            for _ in range(due - attempted):
                delivered += await self.send_planned(self.traffic.next())
                attempted += 1
            # Pace by the clock, so slow sends catch up instead of drifting.
            await asyncio.sleep(max(0.0, started + attempted / rate - loop.time()))
        return delivered
