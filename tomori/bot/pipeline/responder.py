"""Where a resolved turn ends: a pluggable responder (no LLM call here).

`RecordingResponder` (the default) counts turns per outcome and keeps the
last few; `ReplyingResponder` also answers turns that mention the bot with a
short message, to show the round trip through Discord in the demo (an OK
turn with what the caches resolved, a db_unavailable one with an apology;
the other outcomes are deliberate silences).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from typing import Any, Protocol, runtime_checkable

from tomori.bot.pipeline.turn import Outcome, ResolvedTurn
from tomori.bot.pipeline.waiting import CountWaiters

logger = logging.getLogger(__name__)

DEFAULT_KEEP_LAST = 100
#: Outcomes a mention is answered for.
ANSWERED = frozenset({Outcome.OK, Outcome.DB_UNAVAILABLE})
UNAVAILABLE_TEXT = "I can't reach my database right now; please try again in a moment."


@runtime_checkable
class Responder(Protocol):
    """Receives every resolved turn (a guild turn, a DM, or a stop outcome)."""

    async def respond(self, turn: ResolvedTurn) -> None: ...


class RecordingResponder:
    """Count turns per outcome and keep the last `keep_last` of them (bounded)."""

    def __init__(self, *, keep_last: int = DEFAULT_KEEP_LAST) -> None:
        self.total = 0
        self.by_outcome: Counter[str] = Counter()
        self.last: deque[ResolvedTurn] = deque(maxlen=keep_last)
        self._waiters = CountWaiters()

    async def respond(self, turn: ResolvedTurn) -> None:
        """Record the turn."""
        self.total += 1
        self.by_outcome[turn.outcome] += 1
        self.last.append(turn)
        self._waiters.notify(self.total)

    async def wait_for_turns(self, count: int, *, timeout: float | None = None) -> None:
        """Return once `count` turns have been recorded; TimeoutError after `timeout`."""
        await self._waiters.wait(self.total, count, timeout)

    def latest(self, **match: Any) -> ResolvedTurn | None:
        """Return the newest kept turn whose fields equal `match`, or None."""
        for turn in reversed(self.last):
            if all(getattr(turn, name) == value for name, value in match.items()):
                return turn
        return None

    def snapshot(self) -> dict[str, Any]:
        """Return the counts as plain data."""
        return {"total": self.total, "by_outcome": dict(self.by_outcome)}


class ReplyingResponder(RecordingResponder):
    """Record every turn; answer OK and db_unavailable turns that mention the bot."""

    def __init__(self, client: Any, *, keep_last: int = DEFAULT_KEEP_LAST) -> None:
        super().__init__(keep_last=keep_last)
        self.client = client
        self.replies = 0
        self.reply_failures = 0
        self.replies_cancelled = 0  # in flight when shutdown cancelled their turn

    async def respond(self, turn: ResolvedTurn) -> None:
        """Record the turn; reply when it is addressed to the bot and answered."""
        await super().respond(turn)
        if not turn.mentions_bot or turn.outcome not in ANSWERED:
            return
        channel = self.client.get_partial_messageable(
            turn.channel_disc_id, guild_id=turn.server_disc_id
        )
        try:
            await channel.send(reply_text(turn))
        except asyncio.CancelledError:
            self.replies_cancelled += 1  # quietly: the shutdown's summary counts it
            raise
        except Exception as exc:  # a failed reply must not fail the turn
            self.reply_failures += 1
            logger.warning("reply in %s failed: %s", turn.channel_disc_id, exc)
            return
        self.replies += 1


def reply_text(turn: ResolvedTurn) -> str:
    """Return the short demo answer that shows what the caches resolved."""
    if turn.outcome is Outcome.DB_UNAVAILABLE:
        return UNAVAILABLE_TEXT
    model = turn.llm_codename or "no model"
    memory = turn.stm_user_turns or 0
    return (
        f"{turn.active_persona or 'Tomori'} here (model {model}, "
        f"{turn.history_size} messages of history, {memory} earlier turns remembered)."
    )
