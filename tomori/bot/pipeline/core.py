"""MessagePipeline: resolve, through the cache layers, what one message's turn needs."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from caches.catalogs import CatalogSet
from caches.db_outage import DB_ERRORS, database_failed, failing_layer
from caches.layers.channel_llm import get_cached_channel_llm
from caches.layers.channel_prompt import get_cached_channel_prompt
from caches.layers.channel_whitelist import get_cached_whitelist_status
from caches.layers.llm import ensure_llm_cache
from caches.layers.persona_sprite import get_cached_prompt_sprites
from caches.layers.tomori_state import TomoriState, get_cached_tomori_state
from caches.layers.user import get_cached_blacklist_status
from caches.outage_log import on_log_trail
from caches.turn_notes import TurnNotes
from tomori.bot.pipeline.history import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_SCAN_LIMIT,
    EMPTY_HISTORY,
    RecentMessages,
    resolve_history,
)
from tomori.bot.pipeline.intake import Intake, Stopped
from tomori.bot.pipeline.memory import NO_MEMORY, MemoryStep
from tomori.bot.pipeline.recent import RecentTurns
from tomori.bot.pipeline.resolve import (
    NO_EXTRAS,
    NO_MODEL,
    choose_model,
    choose_persona,
    role_ids,
    server_extras,
    spotlight_persona_id,
    user_and_privacy,
)
from tomori.bot.pipeline.responder import RecordingResponder, Responder
from tomori.bot.pipeline.turn import Outcome, ResolvedTurn, ok_turn, stop_turn
from tomori.bot.pipeline.waiting import CountWaiters
from tomori.domain.knobs import knobs
from tomori.domain.repositories.channels import WhitelistDecision

logger = logging.getLogger(__name__)


@dataclass
class PipelineCounters:
    """What the pipeline has seen; `processed` counts every message, skipped or not."""

    received: int = 0
    processed: int = 0
    turns: int = 0
    skipped_own: int = 0
    skipped_bots: int = 0
    shed: int = 0  # waited past PIPELINE_MAX_WAITING (see `tomori.bot.pipeline.intake`)
    dropped: int = 0  # waiting, or arriving, once the intake closed (shutdown)
    errors: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        """Return the counters as plain data (snapshots, logs)."""
        return {
            "received": self.received,
            "processed": self.processed,
            "turns": self.turns,
            "skipped_own": self.skipped_own,
            "skipped_bots": self.skipped_bots,
            "shed": self.shed,
            "dropped": self.dropped,
            "errors": self.errors,
            "outcomes": dict(self.outcomes),
        }


class MessagePipeline:
    """Turn discord.py messages into ResolvedTurns and hand them to a responder.

    `attach(client)` gives it the bot's own user (to skip its messages) and
    discord.py's message cache (the history window). Everything else comes
    from the cache layers; a warm turn for a known (server, user, channel)
    queries no database.
    """

    def __init__(
        self,
        *,
        responder: Responder | None = None,
        catalogs: CatalogSet | None = None,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        history_scan_limit: int = DEFAULT_SCAN_LIMIT,
        capture_short_term_memory: bool = True,
        workers: int | None = None,
        max_waiting: int | None = None,
    ) -> None:
        if responder is None:
            responder = RecordingResponder()
        self.responder: Responder = responder
        self.catalogs = catalogs
        self.history_limit = history_limit
        self.history_scan_limit = history_scan_limit
        # The history window's index; it notes messages once attached to a
        # client with a message cache (see attach).
        self.history = RecentMessages(scan_limit=0)
        # The crude message count is read once: a Django setting read costs a
        # lazy-object lookup, and this runs on every turn.
        limits = knobs()
        crude = limits.SHORT_TERM_MEMORY_DEFAULT_CRUDE_MESSAGE_COUNT
        self.memory = MemoryStep(capture=capture_short_term_memory, keep=crude - 1)
        self.counters = PipelineCounters()
        self.recent = RecentTurns()
        self._client: Any = None
        self._waiters = CountWaiters()
        self._dropped_at_close = 0
        self.intake = Intake(
            self._take_turn,
            self._shed,
            workers=limits.PIPELINE_WORKERS if workers is None else workers,
            max_waiting=(
                limits.PIPELINE_MAX_WAITING if max_waiting is None else max_waiting
            ),
            drop=self._drop,
        )
        #: Told each turn's outcome and seconds from arrival (the client's histogram).
        self.on_turn: Callable[[str, float], None] | None = None

    def attach(self, client: Any) -> None:
        """Read the bot's user from `client`; window what its message cache holds."""
        self._client = client
        cached = getattr(getattr(client, "_connection", None), "_messages", None)
        # No message cache (max_messages None or 0): no history window, as
        # discord.py holds none; else at most what its deque holds.
        scan = 0 if cached is None else min(self.history_scan_limit, cached.maxlen or 0)
        self.history = RecentMessages(scan_limit=scan)

    def forget_messages(self, channel_id: int, message_ids: Collection[int]) -> None:
        """Drop deleted messages from the history window (discord.py drops them too)."""
        self.history.forget(channel_id, message_ids)

    @property
    def self_id(self) -> int | None:
        """Return the bot's own user id once the client is logged in."""
        user = getattr(self._client, "user", None)
        return None if user is None else user.id

    async def take(self, message: Any) -> None:
        """Resolve `message` now if a turn worker is free, else queue it (bounded).

        The client's entry point (see `tomori.bot.pipeline.intake`): each
        turn's outcome and time since arrival go to `on_turn`.
        """
        self.counters.received += 1  # at arrival: a waiting message is received
        await self.intake.take(message)

    async def _take_turn(self, message: Any, arrived: float) -> None:
        turn = await self.handle(message)  # looked up per call: benchmarks wrap it
        on_turn = self.on_turn
        if turn is not None and on_turn is not None:
            on_turn(turn.outcome, perf_counter() - arrived)

    def _shed(self, message: Any) -> None:
        """Count `message` processed unanswered: it waited past the queue's bound."""
        counters = self.counters
        counters.shed += 1
        self.history.add(message)  # in the window, like a skipped message
        counters.processed += 1
        self._waiters.notify(counters.processed)
        if on_log_trail(counters.shed):
            logger.warning(
                "pipeline: %d message(s) shed so far: more than %d waited for "
                "%d turn worker(s) (PIPELINE_MAX_WAITING, PIPELINE_WORKERS)",
                counters.shed,
                self.intake.max_waiting,
                self.intake.workers,
            )

    def _drop(self, message: Any) -> None:
        """Count `message` processed without a turn: the intake closed (shutdown)."""
        counters = self.counters
        counters.dropped += 1
        counters.processed += 1
        self._waiters.notify(counters.processed)

    def close_intake(self) -> None:
        """Start no turn from now on (shutdown); drop the waiting messages, in one line."""
        intake = self.intake
        if intake.closed:
            return
        dropped = intake.close()
        self._dropped_at_close = dropped
        logger.info(
            "shutdown: intake closed: %d waiting message(s) dropped before their "
            "turn started; %d turn(s) running",
            dropped,
            intake.active,
        )

    async def stop_turns(self, within: float) -> Stopped:
        """Close the intake; let the running turns finish for `within` s, then cancel them."""
        self.close_intake()
        stopped = await self.intake.stop(within)
        later = self.counters.dropped - self._dropped_at_close
        logger.info(
            "shutdown: the running turns ended in %.1f s: %d finished, %d cancelled "
            "(%d with a reply in flight); %d message(s) arriving since dropped",
            stopped.seconds,
            stopped.finished,
            stopped.cancelled,
            getattr(self.responder, "replies_cancelled", 0),
            later,
        )
        return stopped

    async def wait_processed(self, count: int, *, timeout: float | None = None) -> None:
        """Return once `count` messages have been processed (skipped ones included)."""
        await self._waiters.wait(self.counters.processed, count, timeout)

    async def handle(self, message: Any) -> ResolvedTurn | None:
        """Resolve one message and pass its turn on; None if skipped or failed.

        Counts it processed (`take`, the client's entry, counted it received).
        Never raises (but for cancellation): errors are logged and counted. A
        database failure is not an error here: the turn ends db_unavailable
        (see `caches.db_outage` for how it is logged).
        """
        counters = self.counters
        started = perf_counter()
        self.history.add(message)  # every message, skipped ones too (the window)
        try:
            with TurnNotes() as notes:
                turn = await self._handle(message, notes)
        except Exception:
            counters.errors += 1
            logger.exception("pipeline: message %s failed", getattr(message, "id", "?"))
            return None
        finally:
            counters.processed += 1
            self._waiters.notify(counters.processed)
        if turn is not None:
            self.recent.record(turn, notes, perf_counter() - started)
        return turn

    async def _handle(self, message: Any, notes: TurnNotes) -> ResolvedTurn | None:
        author = message.author
        self_id = self.self_id  # read once: a property over the client's state
        if author.id == self_id:
            self.counters.skipped_own += 1
            return None
        if author.bot:  # other bots, and webhooks (their author is a bot user)
            self.counters.skipped_bots += 1
            return None
        turn = await self._resolve(message, notes, self_id)
        if notes.failed or notes.stale:
            turn = dataclasses.replace(
                turn, db_failures=tuple(notes.failed), stale_layers=tuple(notes.stale)
            )
        self.counters.turns += 1
        self.counters.outcomes[turn.outcome] += 1
        await self.responder.respond(turn)
        return turn

    async def _resolve(
        self, message: Any, notes: TurnNotes, self_id: int | None
    ) -> ResolvedTurn:
        guild = message.guild
        channel = message.channel
        mentions = message.mentions
        base: dict[str, Any] = {
            "message_id": message.id,
            "channel_disc_id": channel.id,
            "user_disc_id": message.author.id,
            "mentions_bot": bool(mentions) and any(u.id == self_id for u in mentions),
        }
        try:
            if guild is None:
                return await self._resolve_dm(message, base, self_id)
            base["server_disc_id"] = guild.id
            base["parent_channel_disc_id"] = getattr(channel, "parent_id", None)
            gate = await self._gate(message, guild.id, base, notes)
            if isinstance(gate, ResolvedTurn):
                return gate
            return await self._compose(message, guild, gate, base, self_id)
        except DB_ERRORS as exc:  # from a layer that lets database errors through
            database_failed(failing_layer(exc), exc)
            return stop_turn(Outcome.DB_UNAVAILABLE, base)

    async def _gate(
        self, message: Any, server_disc_id: int, base: Any, notes: TurnNotes
    ) -> ResolvedTurn | tuple[TomoriState, WhitelistDecision]:
        """Return the stop turn (not configured, blacklisted...) or what passed."""
        state = await get_cached_tomori_state(server_disc_id)
        if state is None or not state.configured or state.main_persona is None:
            stop = stop_outcome(Outcome.NOT_CONFIGURED, "tomori_state", notes)
            return stop_turn(stop, base)
        base["server_id"] = state.server_id
        author = message.author
        if await get_cached_blacklist_status(server_disc_id, author.id):
            return stop_turn(stop_outcome(Outcome.BLACKLISTED, "user", notes), base)
        decision = await get_cached_whitelist_status(
            server_disc_id,
            base["channel_disc_id"],
            parent_disc_id=base["parent_channel_disc_id"],
            role_ids=role_ids(author),
        )
        if decision.allowed is not True:  # None: roles unknown, so not allowed
            return stop_turn(Outcome.NOT_WHITELISTED, base)
        return state, decision

    async def _compose(
        self,
        message: Any,
        guild: Any,
        gate: tuple[TomoriState, WhitelistDecision],
        base: dict[str, Any],
        self_id: int | None,
    ) -> ResolvedTurn:
        state, decision = gate
        if not base["mentions_bot"]:
            # A quiet turn (the bot is not mentioned: most of the stream) ends
            # at the gate: it answers nothing, so it chooses no persona and
            # captures nothing (short-term memory is captured after a reply;
            # the next answer takes the messages said since from the window).
            return ok_turn(base, state=state, decision=decision, **QUIET_FIELDS)
        server_id, channel_id = state.server_id, base["channel_disc_id"]
        parent_id = base["parent_channel_disc_id"]
        user, privacy = await user_and_privacy(base["user_disc_id"])
        spotlight = await spotlight_persona_id(state, user, channel_id)
        persona = choose_persona(state, decision, spotlight)
        override = await get_cached_channel_llm(
            server_id, channel_id, parent_disc_id=parent_id
        )
        await ensure_llm_cache()  # a no-op unless llms rows changed
        model = choose_model(state, persona, override, self.catalogs)
        prompt = await get_cached_channel_prompt(server_id, channel_id)
        sprites = await get_cached_prompt_sprites(persona.id) if persona else ()
        extras = await server_extras(state, guild, persona, model.llm)
        window = self._window(message)
        history = await resolve_history(window) if window else EMPTY_HISTORY
        memory = await self.memory.run(
            message, window, guild, persona, self_id=self_id, parent_id=parent_id
        )
        return ok_turn(
            base,
            state=state,
            decision=decision,
            persona=persona,
            spotlight=spotlight,
            model=model,
            prompt=prompt,
            sprites=sprites,
            user=user,
            privacy=privacy,
            extras=extras,
            history=history,
            memory=memory,
        )

    async def _resolve_dm(
        self, message: Any, base: dict[str, Any], self_id: int | None
    ) -> ResolvedTurn:
        user, privacy = await user_and_privacy(base["user_disc_id"])
        window = self._window(message)
        history = await resolve_history(window) if window else EMPTY_HISTORY
        memory = await self.memory.run(message, window, None, None, self_id=self_id)
        return ResolvedTurn(
            Outcome.DM,
            **base,
            user_id=user.id if user is not None else None,
            privacy_level=privacy,
            history_size=history.size,
            sprite_records=history.sprite_records,
            transcripts_found=history.transcripts_found,
            tables_found=history.tables_found,
            stm_entries_found=memory.found,
            stm_user_turns=memory.user_turns,
            stm_server_turns=memory.server_turns,
        )

    def _window(self, message: Any) -> list[Any]:
        return self.history.window(message, self.history_limit)


#: A quiet turn's fields past the gate: nothing resolved (their defaults).
QUIET_FIELDS: dict[str, Any] = {
    "persona": None,
    "spotlight": None,
    "model": NO_MODEL,
    "prompt": None,
    "sprites": (),
    "user": None,
    "privacy": None,
    "extras": NO_EXTRAS,
    "history": EMPTY_HISTORY,
    "memory": NO_MEMORY,
}


def stop_outcome(outcome: Outcome, layer: str, notes: TurnNotes) -> Outcome:
    """Return `outcome`, or db_unavailable if `layer` answered it from a failed read.

    A layer that failed and served its last good value answered for real; one
    that failed and fell back (no state, fail-closed blacklist) did not.
    """
    if layer in notes.failed and layer not in notes.stale:
        return Outcome.DB_UNAVAILABLE
    return outcome
