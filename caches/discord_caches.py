"""discord.py's own caches: O(1) counts, the spec's sweepers, and the emergency clear.

discord.py has no sweepers, so the spec's discord.js policies are applied
here to the structures discord.py keeps (see notes/runtime-facts.md):
``state._messages`` (a bounded deque), ``guild._members``,
``guild._voice_states``, presences stored on each Member, and
``state._users``, a WeakValueDictionary that is never written to: a User goes
by itself once no Member or Message holds it.

Every function that mutates these runs synchronously on the event-loop
thread (no await inside), so no gateway event interleaves with a sweep.
Messages are swept first, because a cached Message holds its author Member.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from discord.presences import ClientStatus

from caches.core.periodic import Waiter, run_periodically, wait_or_stop
from caches.telemetry import emit_metric
from tomori.domain.knobs import knobs

logger = logging.getLogger(__name__)

OFFLINE = "offline"


# --- counting -------------------------------------------------------------------


def _guilds(client: Any) -> list[Any]:
    # A snapshot: a GUILD_CREATE between two sweeps must not break iteration.
    return list(client._connection._guilds.values())


def _has_presence(member: Any) -> bool:
    return member.client_status._status != OFFLINE or bool(member.activities)


def count_presences(client: Any) -> int:
    """Return how many cached members carry a non-offline status or activities."""
    return sum(
        1
        for guild in _guilds(client)
        for member in guild._members.values()
        if _has_presence(member)
    )


#: How old a presence count the live figures may show: the scan walks every
#: cached member (about 10 ms at 22,000), and the snapshot and /metrics
#: each ask for it every few seconds.
PRESENCES_MAX_AGE_SECONDS = 60.0
_presences_seen: dict[int, tuple[float, int]] = {}  # id(client) -> (when, count)


def recent_presences(client: Any, *, max_age: float = PRESENCES_MAX_AGE_SECONDS) -> int:
    """Return `count_presences`, counted again only when the last count is older than `max_age`."""
    now = time.monotonic()
    seen = _presences_seen.get(id(client))
    if seen is not None and now - seen[0] < max_age:
        return seen[1]
    count = count_presences(client)
    _presences_seen.clear()  # one client per process: keep no other
    _presences_seen[id(client)] = (now, count)
    return count


def count_discord_caches(
    client: Any, *, presences_max_age: float = 0.0
) -> dict[str, int]:
    """Return entry counts of discord.py's caches (``len()`` only, plus a presence scan).

    `presences_max_age` lets a periodic reader reuse a presence count that
    recent (see `recent_presences`); 0 counts now.
    """
    state = client._connection
    guilds = _guilds(client)
    messages = state._messages
    return {
        "discord_guilds": len(guilds),
        "discord_users": len(state._users),
        "discord_members": sum(len(g._members) for g in guilds),
        "discord_presences": recent_presences(client, max_age=presences_max_age),
        "discord_channels": sum(len(g._channels) for g in guilds)
        + len(state._private_channels),
        "discord_threads": sum(len(g._threads) for g in guilds),
        "discord_emojis": len(state._emojis),
        "discord_stickers": len(state._stickers),
        "discord_messages": 0 if messages is None else len(messages),
        "discord_voice_states": sum(len(g._voice_states) for g in guilds),
    }


# --- sweepers -------------------------------------------------------------------


def _message_time(message: Any) -> float:
    stamp = message.edited_at or message.created_at
    return float(stamp.timestamp())


def sweep_messages(
    client: Any, *, lifetime_seconds: float, now: float | None = None
) -> int:
    """Drop cached messages older than ``lifetime_seconds``; return how many.

    ``now`` is wall-clock epoch seconds (message times are Discord snowflake
    times). The deque is trimmed in place, so its ``maxlen`` is kept.
    """
    messages = client._connection._messages
    if not messages:
        return 0
    cutoff = (time.time() if now is None else now) - lifetime_seconds
    kept = [message for message in messages if _message_time(message) >= cutoff]
    removed = len(messages) - len(kept)
    if removed:
        messages.clear()
        messages.extend(kept)
    return removed


def _voice_member_ids(guild: Any) -> set[int]:
    return {
        user_id
        for user_id, voice in guild._voice_states.items()
        if voice.channel is not None
    }


def _drop_members(client: Any, should_drop: Callable[[Any], bool] | None) -> int:
    """Drop members (all, or those ``should_drop`` picks), keeping the load-bearing ones."""
    self_id = client._connection.self_id
    removed = 0
    for guild in _guilds(client):
        members = guild._members
        # discord.py resolves permissions through the client's own member,
        # and voice paths read members synchronously with no fetch.
        keep = _voice_member_ids(guild)
        keep.add(self_id)
        doomed = [
            member_id
            for member_id, member in members.items()
            if member_id not in keep and (should_drop is None or should_drop(member))
        ]
        for member_id in doomed:
            del members[member_id]
        removed += len(doomed)
    return removed


def sweep_members(client: Any) -> int:
    """Drop every cached member except the client's own and those in a voice channel."""
    return _drop_members(client, None)


def sweep_bot_users(client: Any) -> int:
    """Drop bot members (not the client's own), which lets their Users go.

    ``state._users`` is a WeakValueDictionary and is never written to: a bot
    User still held by a cached Message stays until that Message is swept.
    """
    return _drop_members(client, lambda member: member._user.bot)


def _has_presence_data(member: Any) -> bool:
    status = member.client_status
    platforms = (status.desktop, status.mobile, status.web)
    return _has_presence(member) or any(p is not None for p in platforms)


def _reset_presence(member: Any) -> bool:
    if not _has_presence_data(member):
        return False
    # Replace rather than mutate: a Member copy handed to an event may share it.
    member.activities = ()
    member.client_status = ClientStatus()
    return True


def _members_except_self(client: Any) -> Iterator[Any]:
    self_id = client._connection.self_id
    for guild in _guilds(client):
        for member_id, member in guild._members.items():
            if member_id != self_id:
                yield member


def sweep_presences(client: Any) -> int:
    """Reset leftover presence data (activities, per-platform status) of offline members."""
    reset = 0
    # Hot loop over every cached member: inlined, cheapest test first.
    for member in _members_except_self(client):
        status = member.client_status
        if status._status != OFFLINE:
            continue
        if member.activities or status.desktop or status.mobile or status.web:
            member.activities = ()
            member.client_status = ClientStatus()
            reset += 1
    return reset


def _clear_all_presences(client: Any) -> int:
    return sum(_reset_presence(member) for member in _members_except_self(client))


def _clear_voice_states(client: Any) -> int:
    self_id = client._connection.self_id
    cleared = 0
    for guild in _guilds(client):
        states = guild._voice_states
        doomed = [user_id for user_id in states if user_id != self_id]
        for user_id in doomed:
            del states[user_id]
        cleared += len(doomed)
    return cleared


def _clear_messages(client: Any) -> int:
    messages = client._connection._messages
    if not messages:
        return 0
    count = len(messages)
    messages.clear()  # the same deque object: maxlen is kept
    return count


def clear_discord_volatile(client: Any) -> dict[str, int]:
    """Clear discord.py's volatile caches for the emergency clear; return counts.

    Drops every cached message, bot members (hence bot users), every presence
    and voice state, never touching the client's own member or voice state.
    Run it on the event-loop thread.
    """
    return {
        "discord_messages": _clear_messages(client),
        "discord_bot_members": sweep_bot_users(client),
        "discord_presences": _clear_all_presences(client),
        "discord_voice_states": _clear_voice_states(client),
    }


# --- scheduling -----------------------------------------------------------------


@dataclass(frozen=True)
class SweepIntervals:
    """How often each sweeper runs, and the message lifetime, in seconds."""

    messages: float
    message_lifetime: float
    members: float
    users: float
    presences: float

    @classmethod
    def from_settings(cls) -> SweepIntervals:
        """Return the intervals configured by the DISCORD_*_SWEEP_* settings."""

        return cls(
            messages=knobs().DISCORD_MESSAGE_SWEEP_INTERVAL_SECONDS,
            message_lifetime=knobs().DISCORD_MESSAGE_LIFETIME_SECONDS,
            members=knobs().DISCORD_MEMBER_SWEEP_INTERVAL_SECONDS,
            users=knobs().DISCORD_USER_SWEEP_INTERVAL_SECONDS,
            presences=knobs().DISCORD_PRESENCE_SWEEP_INTERVAL_SECONDS,
        )


class DiscordSweepSchedule:
    """Run each sweeper at its own interval; ``run_due`` is the whole tick."""

    def __init__(
        self,
        client: Any,
        intervals: SweepIntervals,
        *,
        start: float,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.intervals = intervals
        self._wall_clock = wall_clock
        # Order matters: messages hold their author Members, so they go first.
        self._sweepers: dict[str, tuple[float, Callable[[], int]]] = {
            "messages": (intervals.messages, self._sweep_messages),
            "members": (intervals.members, lambda: sweep_members(client)),
            "bot_users": (intervals.users, lambda: sweep_bot_users(client)),
            "presences": (intervals.presences, lambda: sweep_presences(client)),
        }
        self._due = {name: start + every for name, (every, _) in self._sweepers.items()}
        self.totals = dict.fromkeys(self._sweepers, 0)

    def _sweep_messages(self) -> int:
        return sweep_messages(
            self.client,
            lifetime_seconds=self.intervals.message_lifetime,
            now=self._wall_clock(),
        )

    def next_due(self) -> float:
        """Return the clock time at which the next sweeper is due."""
        return min(self._due.values())

    def run_due(self, now: float) -> dict[str, int]:
        """Run every sweeper due at ``now``; return {sweeper: removed} for those run."""
        removed: dict[str, int] = {}
        for name, (every, sweep) in self._sweepers.items():
            if now < self._due[name]:
                continue
            try:
                removed[name] = sweep()
            except Exception:  # one broken sweeper must not stop the others
                logger.exception("discord sweeper %s failed", name)
                removed[name] = -1
            else:
                self.totals[name] += removed[name]
            # Skip missed ticks instead of running a burst after a stall.
            while self._due[name] <= now:
                self._due[name] += every
        return removed


async def run_discord_sweepers(
    client: Any,
    *,
    stop: asyncio.Event,
    intervals: SweepIntervals | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    wait: Waiter = wait_or_stop,
) -> None:
    """Run the sweepers at their intervals until ``stop`` is set.

    ``intervals`` defaults to the settings. Each tick that runs a sweeper logs
    a ``discord_sweep`` metric line with the removed counts and duration.
    """
    schedule = DiscordSweepSchedule(
        client,
        intervals or SweepIntervals.from_settings(),
        start=clock(),
        wall_clock=wall_clock,
    )

    def sweep_due() -> None:
        started = time.perf_counter()
        removed = schedule.run_due(clock())
        if removed:
            duration_ms = round((time.perf_counter() - started) * 1000, 3)
            emit_metric(
                "discord_sweep", {**removed, "duration_ms": duration_ms}, db=False
            )

    await run_periodically(
        sweep_due,
        every=lambda: schedule.next_due() - clock(),
        stop=stop,
        name="discord sweep",
        first_after=True,
        wait=wait,
    )
