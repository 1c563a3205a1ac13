"""The simulated REST API: login, gateway discovery, messages, webhooks, members."""

from __future__ import annotations

import json
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from tomori.bot.simulator.event_payloads import (
    message_payload,
    webhook_author_payload,
)
from tomori.bot.simulator.payloads import (
    Payload,
    member_payload,
    user_payload,
    webhook_payload,
)
from tomori.bot.simulator.records import SentMessage, SimStats, UnknownRoute
from tomori.bot.simulator.scenario import Scenario
from tomori.bot.simulator.snowflake import SnowflakeFactory
from tomori.bot.simulator.world import SimGuild, SimUser, SimWebhook, World

API_PREFIX = "/api/v10"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, *, status: int = 200) -> web.Response:
    """Return JSON with Content-Type exactly application/json (no charset).

    discord.py compares the header to "application/json" literally, so
    aiohttp's json_response (which appends a charset) would break login.
    """
    body = json.dumps(data, separators=(",", ":")).encode()
    return web.Response(
        body=body, status=status, headers={"Content-Type": "application/json"}
    )


def error_response(status: int, message: str, code: int = 0) -> web.Response:
    """Return a Discord-style JSON error."""
    return json_response({"message": message, "code": code}, status=status)


async def read_payload(request: web.Request) -> dict[str, Any]:
    """Return a request's JSON body, or the payload_json part of a multipart."""
    if request.content_type == "application/json":
        data = await request.json()
        return data if isinstance(data, dict) else {}
    if request.content_type.startswith("multipart/"):
        form = await request.post()
        raw = form.get("payload_json")
        return json.loads(raw) if isinstance(raw, str) else {}
    return {}


class Simulator(Protocol):
    """What the routes use of the simulator (``server.SimulatedDiscord``)."""

    world: World
    stats: SimStats
    scenario: Scenario
    ids: SnowflakeFactory
    sent_messages: deque[SentMessage]
    unknown_routes: deque[UnknownRoute]

    @property
    def gateway_url(self) -> str:
        """Return the gateway URL discord.py connects to."""

    async def echo(self, guild_id: int, message: Payload) -> None:
        """Dispatch the bot's own posted message back, when echo is on."""

    async def webhooks_update(self, guild_id: int, channel_id: int) -> bool:
        """Dispatch WEBHOOKS_UPDATE for a channel."""


class RestApi:
    """Route handlers answering discord.py's HTTP client for a SimulatedDiscord."""

    def __init__(self, sim: Simulator):
        self.sim = sim
        self.owner = SimUser(
            id=sim.world.bot_user.id - 1, username="tomori_owner", global_name="Owner"
        )

    def add_routes(self, app: web.Application) -> None:
        """Register every route, then the catch-all that records unknown ones."""
        routes: list[tuple[str, str, Handler]] = [
            ("GET", "/users/@me", self.get_me),
            ("GET", "/oauth2/applications/@me", self.get_application),
            ("GET", "/gateway", self.get_gateway),
            ("GET", "/gateway/bot", self.get_gateway_bot),
            ("POST", "/channels/{channel_id}/messages", self.create_message),
            ("POST", "/channels/{channel_id}/typing", self.trigger_typing),
            ("GET", "/channels/{channel_id}/webhooks", self.channel_webhooks),
            ("POST", "/channels/{channel_id}/webhooks", self.create_webhook),
            ("GET", "/guilds/{guild_id}/webhooks", self.guild_webhooks),
            ("GET", "/guilds/{guild_id}/members/{user_id}", self.get_member),
            ("GET", "/webhooks/{webhook_id}", self.get_webhook),
            ("DELETE", "/webhooks/{webhook_id}", self.delete_webhook),
            ("DELETE", "/webhooks/{webhook_id}/{token}", self.delete_webhook),
            ("POST", "/webhooks/{webhook_id}/{token}", self.execute_webhook),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, API_PREFIX + path, handler)
        app.router.add_route("*", "/{tail:.*}", self.unknown)

    @web.middleware
    async def count_requests(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        """Count every REST request (the gateway websocket excluded)."""
        if request.path.startswith(API_PREFIX):
            self.sim.stats.rest_requests += 1
        return await handler(request)

    async def get_me(self, request: web.Request) -> web.Response:
        """Answer GET /users/@me with the bot user (the login check)."""
        data = user_payload(self.sim.world.bot_user)
        data.update(verified=True, mfa_enabled=False, locale="en-US", email=None)
        return json_response(data)

    async def get_application(self, request: web.Request) -> web.Response:
        """Answer GET /oauth2/applications/@me with the bot's application."""
        world = self.sim.world
        return json_response(
            {
                "id": str(world.application_id),
                "name": world.bot_user.global_name or world.bot_user.username,
                "icon": None,
                "description": "Simulated application",
                "summary": "",
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": user_payload(self.owner),
                "verify_key": "0" * 64,
                "team": None,
                "flags": 0,
                "rpc_origins": [],
                "bot": user_payload(world.bot_user),
            }
        )

    async def get_gateway(self, request: web.Request) -> web.Response:
        """Answer GET /gateway with the gateway URL."""
        return json_response({"url": self.sim.gateway_url})

    async def get_gateway_bot(self, request: web.Request) -> web.Response:
        """Answer GET /gateway/bot with the URL, shard count and start limits."""
        limit = {
            "total": 1000,
            "remaining": 1000,
            "reset_after": 86_400_000,
            "max_concurrency": 1,
        }
        return json_response(
            {
                "url": self.sim.gateway_url,
                "shards": self.sim.scenario.recommended_shards,
                "session_start_limit": limit,
            }
        )

    async def create_message(self, request: web.Request) -> web.Response:
        """Record a message the bot posts, echo it, and return it."""
        channel_id = int(request.match_info["channel_id"])
        guild = self.sim.world.guild_of_channel(channel_id)
        if guild is None:
            return error_response(404, "Unknown Channel", 10003)
        body = await read_payload(request)
        bot = self.sim.world.bot_user
        message = message_payload(
            message_id=self.sim.ids.next(),
            channel_id=channel_id,
            author=user_payload(bot),
            content=str(body.get("content") or ""),
            guild_id=guild.id,
            member=member_payload(guild.members[bot.id], with_user=False),
        )
        _copy_extras(body, message, guild)
        self.sim.stats.rest_messages += 1
        self._record("rest", message, guild, body)
        await self.sim.echo(guild.id, message)
        # A REST reply carries neither guild_id nor member; the gateway copy does.
        reply = {k: v for k, v in message.items() if k not in ("guild_id", "member")}
        return json_response(reply)

    async def trigger_typing(self, request: web.Request) -> web.Response:
        """Accept a typing indicator."""
        return web.Response(status=204)

    async def channel_webhooks(self, request: web.Request) -> web.Response:
        """List a channel's webhooks."""
        channel_id = int(request.match_info["channel_id"])
        guild = self.sim.world.guild_of_channel(channel_id)
        if guild is None:
            return error_response(404, "Unknown Channel", 10003)
        hooks = [w for w in guild.webhooks if w.channel_id == channel_id]
        return json_response([self._webhook_json(w) for w in hooks])

    async def guild_webhooks(self, request: web.Request) -> web.Response:
        """List a guild's webhooks."""
        guild = self.sim.world.guilds.get(int(request.match_info["guild_id"]))
        if guild is None:
            return error_response(404, "Unknown Guild", 10004)
        return json_response([self._webhook_json(w) for w in guild.webhooks])

    async def create_webhook(self, request: web.Request) -> web.Response:
        """Create a webhook on a channel and dispatch WEBHOOKS_UPDATE."""
        channel_id = int(request.match_info["channel_id"])
        guild = self.sim.world.guild_of_channel(channel_id)
        if guild is None:
            return error_response(404, "Unknown Channel", 10003)
        body = await read_payload(request)
        webhook = SimWebhook(
            id=self.sim.ids.next(),
            token=secrets.token_urlsafe(51),
            guild_id=guild.id,
            channel_id=channel_id,
            name=str(body.get("name") or "Webhook"),
            creator_id=self.sim.world.bot_user.id,
        )
        self.sim.world.add_webhook(webhook)
        await self.sim.webhooks_update(guild.id, channel_id)
        return json_response(self._webhook_json(webhook))

    async def get_webhook(self, request: web.Request) -> web.Response:
        """Return one webhook."""
        webhook = self.sim.world.webhooks.get(int(request.match_info["webhook_id"]))
        if webhook is None:
            return error_response(404, "Unknown Webhook", 10015)
        return json_response(self._webhook_json(webhook))

    async def delete_webhook(self, request: web.Request) -> web.Response:
        """Delete a webhook (with or without its token)."""
        webhook_id = int(request.match_info["webhook_id"])
        webhook = self.sim.world.webhooks.get(webhook_id)
        if webhook is None:
            return error_response(404, "Unknown Webhook", 10015)
        token = request.match_info.get("token")
        if token is not None and token != webhook.token:
            return error_response(401, "Invalid Webhook Token", 50027)
        self.sim.world.remove_webhook(webhook_id)
        await self.sim.webhooks_update(webhook.guild_id, webhook.channel_id)
        return web.Response(status=204)

    async def execute_webhook(self, request: web.Request) -> web.Response:
        """Record a webhook post, echo it; return it when ?wait=true."""
        webhook = self.sim.world.webhooks.get(int(request.match_info["webhook_id"]))
        if webhook is None:
            return error_response(404, "Unknown Webhook", 10015)
        if request.match_info["token"] != webhook.token:
            return error_response(401, "Invalid Webhook Token", 50027)
        body = await read_payload(request)
        thread_id = request.query.get("thread_id")
        message = message_payload(
            message_id=self.sim.ids.next(),
            channel_id=int(thread_id) if thread_id else webhook.channel_id,
            author=webhook_author_payload(webhook, body.get("username")),
            content=str(body.get("content") or ""),
            guild_id=webhook.guild_id,
            webhook_id=webhook.id,
        )
        guild = self.sim.world.guilds[webhook.guild_id]
        _copy_extras(body, message, guild)
        self.sim.stats.webhook_executions += 1
        self._record("webhook", message, guild, body, webhook_id=webhook.id)
        await self.sim.echo(guild.id, message)
        if request.query.get("wait") in ("1", "true", "True"):
            return json_response(message)
        return web.Response(status=204)

    async def get_member(self, request: web.Request) -> web.Response:
        """Return one guild member (a member fetch)."""
        guild = self.sim.world.guilds.get(int(request.match_info["guild_id"]))
        if guild is None:
            return error_response(404, "Unknown Guild", 10004)
        member = guild.members.get(int(request.match_info["user_id"]))
        if member is None:
            return error_response(404, "Unknown Member", 10007)
        return json_response(member_payload(member))

    async def unknown(self, request: web.Request) -> web.Response:
        """Record a route the simulator does not serve and answer 404."""
        self.sim.unknown_routes.append(UnknownRoute(request.method, request.path))
        self.sim.stats.unknown_routes += 1
        return error_response(404, "404: Not Found")

    def _webhook_json(self, webhook: SimWebhook) -> Payload:
        creator = self.sim.world.users.get(webhook.creator_id or 0)
        return webhook_payload(webhook, creator)

    def _record(
        self,
        via: str,
        message: Payload,
        guild: SimGuild,
        body: dict[str, Any],
        *,
        webhook_id: int | None = None,
    ) -> None:
        self.sim.sent_messages.append(
            SentMessage(
                via=via,
                message_id=int(message["id"]),
                channel_id=int(message["channel_id"]),
                guild_id=guild.id,
                content=message["content"],
                payload=body,
                webhook_id=webhook_id,
            )
        )


def _copy_extras(body: dict[str, Any], message: Payload, guild: SimGuild) -> None:
    """Carry embeds and a reply reference from the request into the message."""
    message["embeds"] = list(body.get("embeds") or [])
    reference = body.get("message_reference")
    if isinstance(reference, dict):
        message["message_reference"] = {
            "type": 0,
            "message_id": str(reference.get("message_id")),
            "channel_id": str(reference.get("channel_id") or message["channel_id"]),
            "guild_id": str(guild.id),
        }
