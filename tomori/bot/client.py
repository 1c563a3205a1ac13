"""The discord.py client of a bot worker: intents, cache settings, events -> pipeline.

Intents (each one is gateway traffic and memory, so only what a turn or an
invalidation reads):
- guilds: channels, threads and roles (whitelist parents, role deletions).
- members (privileged): member updates and leaves keep the member cache
  right; without it a departed member would stay cached until a sweep.
- presences (privileged): the spec's production cache holds ~12,100
  presences and history context may show what a user is doing. It is the
  heaviest intent; the presence sweeper in `discord_caches` bounds it.
- voice_states: the voice paths read members synchronously (the member
  sweeper keeps members in voice for that reason).
- guild_messages, dm_messages, message_content (privileged): the pipeline's
  input and its history window.
- emojis_and_stickers: GUILD_EMOJIS/STICKERS_UPDATE invalidate emoji_sticker.
- webhooks: WEBHOOKS_UPDATE invalidates the webhook cache.
Left off: typing, reactions, invites, integrations, scheduled events,
auto-moderation, polls: nothing here reads them.

discord.py caches:
- max_messages = DISCORD_MAX_MESSAGES (default 1000): one process-wide deque;
  it is also the turn's history window (`pipeline.history`), swept hourly
  to the spec's 30-minute lifetime.
- member_cache_flags: voice + joined (discord.py's default for these
  intents). Voice members must stay cached; joined caches members that
  GUILD_CREATE and GUILD_MEMBER_ADD deliver. At ~920 B each, the spec's
  31,800 members would be ~29 MB; the member sweeper caps that growth.
- chunk_guilds_at_startup = False by default: a turn needs only the author,
  and every MESSAGE_CREATE carries the author's member object (roles
  included), so chunking 516 guilds (op 8 is rate-limited) buys memory and
  start-up time for nothing. GUILD_CREATE still carries every member of a
  guild under large_threshold (250) and the online ones of larger guilds.
  A swept member who speaks again is an uncached Member built from the
  message, which the pipeline handles like any other.

Events: on_message feeds the pipeline's bounded intake (PIPELINE_WORKERS
turns at once, the rest queued: `tomori.bot.pipeline.intake`), which logs
and counts its own errors; the handlers below invalidate what Discord changed (see
`tomori.bot.pipeline.discord_events` for why roles need so little).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import discord

from metrics.prometheus.buckets import TurnTimings
from tomori.bot import shared_strings
from tomori.bot.http_buckets import throttle_bucket_sweeps
from tomori.bot.pipeline import MessagePipeline
from tomori.bot.pipeline import discord_events as events
from tomori.bot.pipeline.waiting import CountWaiters
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

#: What discord.py's first Client logs when its voice extra (PyNaCl, davey) is
#: not installed. A worker joins no voice channel (voice states come with the
#: gateway and need neither), so it does not warn about voice: what voice would
#: need is in docs/operations.md#voice.
VOICE_NOT_INSTALLED = frozenset(
    {
        "PyNaCl is not installed, voice will NOT be supported",
        "davey is not installed, voice will NOT be supported",
    }
)


class VoiceNotUsedFilter(logging.Filter):
    """Drop discord.client's "voice will NOT be supported" records, and only those."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but the two of VOICE_NOT_INSTALLED."""
        return record.msg not in VOICE_NOT_INSTALLED


_VOICE_FILTER = VoiceNotUsedFilter()

IdentifyHook = Callable[..., Awaitable[None]]


def bot_intents(*, presences: bool = True) -> discord.Intents:
    """Return the intents the bot worker runs with (see the module docstring)."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.members = True
    intents.presences = presences
    intents.voice_states = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    intents.emojis_and_stickers = True
    intents.webhooks = True
    return intents


def member_cache_flags() -> discord.MemberCacheFlags:
    """Return the member cache policy: members in voice, and members that arrive."""
    return discord.MemberCacheFlags(voice=True, joined=True)


class TomoriClientMixin:
    """The bot's events on top of discord.Client or discord.AutoShardedClient."""

    pipeline: MessagePipeline
    ready_event: asyncio.Event
    counters: Counter[str]
    turn_timings: TurnTimings

    def _setup_tomori(
        self, pipeline: MessagePipeline, before_identify: IdentifyHook | None
    ) -> None:
        # Before any gateway event: members' presence strings are shared.
        shared_strings.install()
        self.pipeline = pipeline
        self.ready_event = asyncio.Event()
        self.counters = Counter()
        self.turn_timings = TurnTimings()
        self._counter_waiters: dict[str, CountWaiters] = {}
        self._before_identify = before_identify
        pipeline.attach(self)
        pipeline.on_turn = self.turn_timings.observe  # ~0.3 us a turn
        # discord.py's close() ends with this HTTP session; close_gateway()
        # keeps it for the replies of the turns still running (shutdown).
        http: Any = self.http  # type: ignore[attr-defined]
        throttle_bucket_sweeps(http)
        self._keep_http = False
        self._close_http_session = http.close
        http.close = self._close_http_unless_kept

    async def _close_http_unless_kept(self) -> None:
        if not self._keep_http:
            await self._close_http_session()

    async def close_gateway(self) -> None:
        """Close the gateway: no event arrives after; the HTTP session stays open.

        At shutdown the turns already running still reply through it;
        `close()` closes it once they have ended.
        """
        self._keep_http = True
        await super().close()  # type: ignore[misc]

    async def close(self) -> None:
        """Close the gateway if still open, then the HTTP session."""
        self._keep_http = False
        await super().close()  # type: ignore[misc]  # after close_gateway: waits for it
        await self.http.close()  # type: ignore[attr-defined]  # a closed session: no-op

    def _count(self, name: str, amount: int = 1) -> None:
        self.counters[name] += amount
        waiters = self._counter_waiters.get(name)
        if waiters is not None:
            waiters.notify(self.counters[name])

    async def wait_for_count(
        self, name: str, value: int, *, timeout: float | None = None
    ) -> None:
        """Return once counter `name` reaches `value` (tests and the demo wait on it)."""
        waiters = self._counter_waiters.setdefault(name, CountWaiters())
        await waiters.wait(self.counters[name], value, timeout)

    async def before_identify_hook(
        self, shard_id: int | None, *, initial: bool = False
    ) -> None:
        """Run the injected hook (the simulator has no IDENTIFY limit), else discord.py's."""
        if self._before_identify is not None:
            await self._before_identify(shard_id, initial=initial)
            return
        await super().before_identify_hook(shard_id, initial=initial)  # type: ignore[misc]

    async def on_ready(self) -> None:
        """Note that every shard is connected and its guilds arrived."""
        self._count("ready")
        self.ready_event.set()
        logger.info("bot ready: %d guilds", len(self.guilds))  # type: ignore[attr-defined]

    async def on_message(self, message: discord.Message) -> None:
        """Hand the message to the pipeline; nothing it raises reaches discord.py."""
        self._count("messages")
        try:
            await self.pipeline.take(message)
        except Exception:  # handle() already logs its own; this guards the guard
            logger.exception("on_message failed for %s", message.id)

    def _invalidated(self, kind: str, removed: int) -> None:
        self._count("invalidated_entries", removed)
        self._count(f"invalidate_{kind}")

    async def on_guild_emojis_update(self, guild: discord.Guild, *_: Any) -> None:
        """Drop the guild's stored expressions (the next turn re-syncs them)."""
        self._invalidated("expressions", await events.expressions_changed(guild.id))

    async def on_guild_stickers_update(self, guild: discord.Guild, *_: Any) -> None:
        """Drop the guild's stored expressions (the next turn re-syncs them)."""
        self._invalidated("expressions", await events.expressions_changed(guild.id))

    async def on_member_update(
        self, before: discord.Member, after: discord.Member
    ) -> None:
        """Count it: a role change is a new whitelist key, so nothing is dropped."""
        if before._roles != after._roles:
            self._count("member_role_changes")

    async def on_guild_role_delete(self, role: discord.Role) -> None:
        """Drop the guild's whitelist entries (signatures with the role are dead)."""
        self._invalidated("role_delete", await events.role_deleted(role.guild.id))

    async def on_webhooks_update(self, channel: Any) -> None:
        """Drop the channel's webhook and persona webhook entries."""
        self._invalidated("webhooks", events.webhooks_changed(channel.id))

    async def on_raw_thread_update(self, payload: discord.RawThreadUpdateEvent) -> None:
        """Drop the thread's whitelist, LLM and prompt entries (cached thread or not)."""
        removed = await events.channel_changed(payload.guild_id, payload.thread_id)
        self._invalidated("thread", removed)

    async def on_raw_message_delete(
        self, payload: discord.RawMessageDeleteEvent
    ) -> None:
        """Drop a deleted message from the history window (discord.py's cache drops it)."""
        self.pipeline.forget_messages(payload.channel_id, {payload.message_id})

    async def on_raw_bulk_message_delete(
        self, payload: discord.RawBulkMessageDeleteEvent
    ) -> None:
        """Drop bulk-deleted messages from the history window."""
        self.pipeline.forget_messages(payload.channel_id, payload.message_ids)

    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """Drop the thread's whitelist, LLM and prompt entries (cached thread or not)."""
        removed = await events.channel_changed(payload.guild_id, payload.thread_id)
        self._invalidated("thread", removed)

    async def on_guild_channel_delete(self, channel: Any) -> None:
        """Drop the channel's entries, its threads' and its webhook's."""
        removed = await events.channel_changed(channel.guild.id, channel.id)
        removed += events.webhooks_changed(channel.id)
        self._invalidated("channel", removed)

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        """Drop every cached entry of a guild the bot left."""
        channel_ids = [c.id for c in (*guild.channels, *guild.threads)]
        self._invalidated("guild", await events.guild_removed(guild.id, channel_ids))

    def snapshot(self) -> dict[str, Any]:
        """Return the client's and the pipeline's counters as plain data."""
        return {
            "client": dict(self.counters),
            "pipeline": self.pipeline.counters.as_dict(),
        }


class TomoriClient(TomoriClientMixin, discord.Client):
    """The bot on one gateway connection (no sharding)."""

    def __init__(
        self,
        *,
        pipeline: MessagePipeline,
        before_identify_hook: IdentifyHook | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._setup_tomori(pipeline, before_identify_hook)


class TomoriShardedClient(TomoriClientMixin, discord.AutoShardedClient):
    """The bot on the shards `shard_ids` of `shard_count` (or all, when not given)."""

    def __init__(
        self,
        *,
        pipeline: MessagePipeline,
        before_identify_hook: IdentifyHook | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self._setup_tomori(pipeline, before_identify_hook)


def client_options(**overrides: Any) -> dict[str, Any]:
    """Return the discord.py options chosen in the module docstring, with overrides."""
    options: dict[str, Any] = {
        "intents": bot_intents(),
        "max_messages": knobs().DISCORD_MAX_MESSAGES,
        "member_cache_flags": member_cache_flags(),
        "chunk_guilds_at_startup": False,
    }
    options.update(overrides)
    return options


def build_client(
    *,
    pipeline: MessagePipeline,
    shard_ids: list[int] | None = None,
    shard_count: int | None = None,
    before_identify_hook: IdentifyHook | None = None,
    **options: Any,
) -> TomoriClient | TomoriShardedClient:
    """Return the bot's client: sharded when shard ids or a count are given.

    `options` override discord.py's (intents, max_messages, ...);
    `before_identify_hook(shard_id, *, initial)` replaces discord.py's wait
    between IDENTIFYs (pass a no-op against the simulator).
    """
    merged = client_options(**options)
    # Before the first Client: it logs the voice warnings from its __init__.
    logging.getLogger("discord.client").addFilter(_VOICE_FILTER)  # once: idempotent
    if shard_ids is None and shard_count is None:
        return TomoriClient(
            pipeline=pipeline, before_identify_hook=before_identify_hook, **merged
        )
    if shard_ids is not None and shard_count is None:
        raise ValueError("shard_ids need shard_count")
    return TomoriShardedClient(
        pipeline=pipeline,
        before_identify_hook=before_identify_hook,
        shard_ids=shard_ids,
        shard_count=shard_count,
        **merged,
    )


async def skip_identify_wait(shard_id: int | None, *, initial: bool = False) -> None:
    """A before_identify_hook for the simulator, which has no IDENTIFY rate limit."""
    return None
