"""Operator commands over the bus: run this process's handler, send, answer, collect replies.

A command is published on the bus channel with a reply id; every subscribed
process answers by pushing a reply on the Redis list `tomori:reply:<id>`
(with an expiry), which the sender reads with BLPOP until every receiver has
answered or the timeout passes.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import redis

from caches.bus.errors import BusUnavailable
from caches.bus.publisher import RedisPublisher, redis_client
from caches.bus.stats import BusStats
from caches.core.loop import run_on_loop
from caches.messages import (
    REPLY_PREFIX,
    AnyCommand,
    CommandMessage,
    MalformedMessage,
    OnWorker,
    ReplyMessage,
    WorkerReply,
    decode,
    encode,
)
from tomori.domain.service_urls import describe_redis_url

logger = logging.getLogger(__name__)

#: Returns this worker's reply, or None to decline a command for another worker.
CommandHandler = Callable[
    [AnyCommand], WorkerReply | None | Awaitable[WorkerReply | None]
]

#: Replies left unread (the sender timed out) expire after this many seconds.
REPLY_TTL_SECONDS = 60
#: Longest wait for older messages to be published before a command is sent.
BACKLOG_DRAIN_SECONDS = 2.0


class HandlerRunner:
    """This process's command handler; every reply names the worker that gave it."""

    def __init__(self, *, origin: str, worker_id: str) -> None:
        self.origin = origin
        self.worker_id = worker_id
        self.handler: CommandHandler | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, command: AnyCommand, timeout: float) -> WorkerReply | None:
        """Run the handler on `command`; an error becomes a failed reply, None a decline."""
        try:
            reply = self._call(command, timeout)
            if reply is None:
                return None
        except Exception as exc:
            logger.exception("bus: command handler failed")
            reply = WorkerReply(
                worker_id="",
                ok=False,
                command_id=command.id,
                op=command.op,
                error=f"{type(exc).__name__}: {exc}",
            )
        return replace(
            reply,
            worker_id=reply.worker_id or self.worker_id or self.origin,
            origin=reply.origin or self.origin,
        )

    def _call(self, command: AnyCommand, timeout: float) -> WorkerReply | None:
        if self.handler is None:
            raise RuntimeError("no command handler in this process")
        result = self.handler(command)
        if inspect.isawaitable(result):
            result = self._await(result, timeout)
        if result is not None and not isinstance(result, WorkerReply):
            raise TypeError(f"the handler returned {type(result).__name__}")
        return result

    def answers(self, command: AnyCommand, timeout: float) -> list[WorkerReply]:
        """Return this process's reply as a list: empty without a handler or on a decline."""
        reply = self.run(command, timeout) if self.handler is not None else None
        return [] if reply is None else [reply]

    def _await(self, awaitable: Any, timeout: float) -> Any:
        return run_on_loop(self.loop, lambda: awaitable, timeout=timeout)


class RedisCommands:
    """Command round trips over Redis for one bus."""

    def __init__(
        self,
        url: str,
        *,
        publisher: RedisPublisher,
        runner: HandlerRunner,
        stats: BusStats,
    ) -> None:
        self.url = url
        self._publisher = publisher
        self._runner = runner
        self._stats = stats
        self._client: redis.Redis | None = None
        self._probe: redis.Redis | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._reply_seq = 0

    def send(
        self, command: AnyCommand, *, timeout: float, listening_here: bool
    ) -> list[WorkerReply]:
        """Publish `command`; return this process's reply and every remote one in time."""
        deadline = time.monotonic() + timeout
        self.require_sendable(timeout)
        command_id = uuid.uuid4().hex
        reply_to = REPLY_PREFIX + command_id
        receivers = self._publisher.publish(
            lambda seq: CommandMessage(
                origin=self._runner.origin,
                seq=seq,
                sent_at=time.time(),
                id=command_id,
                reply_to=reply_to,
                timeout=timeout,
                command=command,
            )
        )
        if receivers is None:
            # Redis went away after the PING: the publisher keeps the command
            # in its backlog, and receivers drop it once older than `timeout`.
            raise BusUnavailable(
                f"bus unreachable: Redis at {self._where()} stopped answering; "
                f"the command was not delivered (workers ignore it after {timeout:g} s)"
            )
        replies = self._runner.answers(command, timeout)
        # Our own subscriber received it too, and skips its own messages.
        expected = receivers - int(listening_here)
        if isinstance(command, OnWorker):
            # One worker answers it: the others' declines need not be awaited
            # (one busy with a catalog refresh would hold the operator up).
            if replies:
                return replies
            return self._collect(reply_to, expected, deadline, wanted=1)
        return replies + self._collect(reply_to, expected, deadline)

    def require_sendable(self, timeout: float) -> None:
        """Raise BusUnavailable unless a command sent now would be published."""
        # Checked before publishing: a command the publisher cannot send waits
        # in its backlog and could still run after the operator was told it failed.
        if self._probe is None:
            self._probe = redis_client(self.url)  # fails within seconds, even paused
        try:
            self._probe.ping()
        except (redis.RedisError, OSError) as exc:
            raise BusUnavailable(
                f"bus unreachable: Redis at {self._where()} does not answer ({exc}); "
                "nothing was sent"
            ) from exc
        drain = min(timeout, BACKLOG_DRAIN_SECONDS)
        if self._publisher.backlog and not self._publisher.drain(drain):
            raise BusUnavailable(
                f"bus unreachable: {self._publisher.backlog} older message(s) still "
                f"wait to be published to Redis at {self._where()}; nothing was sent"
            )

    def _where(self) -> str:
        return describe_redis_url(self.url)

    def _collect(
        self, reply_to: str, expected: int, deadline: float, *, wanted: int = 0
    ) -> list[WorkerReply]:
        """Read up to `expected` replies until `deadline`, or until `wanted` handled ones."""
        replies: list[WorkerReply] = []
        for _ in range(max(expected, 0)):
            if wanted and len(replies) >= wanted:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                item = self._replies().blpop([reply_to], timeout=remaining)
            except redis.RedisError as exc:
                logger.warning("bus: reading command replies failed: %s", exc)
                break
            if item is None:
                break
            reply = _received_reply(item[1])
            if reply is not None:
                replies.append(reply)
        return replies

    def submit_answer(self, message: CommandMessage) -> None:
        """Answer a received command off the subscriber thread."""
        if self._executor is None:
            # Commands must not hold up the invalidations behind them.
            self._executor = ThreadPoolExecutor(
                1, thread_name_prefix="tomori-bus-command"
            )
        self._executor.submit(self._answer, message)

    def _answer(self, message: CommandMessage) -> None:
        timeout = message.timeout or 5.0
        if time.time() > message.sent_at + timeout:
            # Published late (Redis was down) or delivered late: its sender has
            # stopped waiting, so running it now would surprise everyone.
            logger.warning("bus: dropped an operator command older than its timeout")
            self._stats.incr("commands_expired")
            return
        # No handler, or a command for another worker: "not handled", at once,
        # so that the sender does not wait for this process.
        answers = self._runner.answers(message.command, timeout)
        reply = answers[0] if answers else None
        self._reply_seq += 1
        body = ReplyMessage(
            origin=self._runner.origin,
            seq=self._reply_seq,
            sent_at=time.time(),
            id=message.id,
            handled=reply is not None,
            reply=reply,
        )
        self._push(message.reply_to, encode(body))
        self._stats.incr("commands_handled")

    def _push(self, reply_to: str, data: str) -> None:
        try:
            with self._replies().pipeline() as pipe:
                pipe.rpush(reply_to, data)
                pipe.expire(reply_to, REPLY_TTL_SECONDS)
                pipe.execute()
        except redis.RedisError as exc:
            logger.warning("bus: could not send a command reply: %s", exc)

    def _replies(self) -> redis.Redis:
        if self._client is None:
            # BLPOP blocks for the whole timeout: no socket timeout here.
            self._client = redis_client(self.url, socket_timeout=None)
        return self._client

    def stop(self) -> None:
        """Stop answering (commands in progress finish on their own)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def close(self) -> None:
        """Stop answering and disconnect."""
        self.stop()
        for client in (self._client, self._probe):
            if client is not None:
                client.close()


def _received_reply(data: bytes | str) -> WorkerReply | None:
    """Return the worker reply in `data`; None for a process without a handler."""
    try:
        message = decode(data)
    except MalformedMessage as exc:
        logger.warning("bus: dropped a malformed command reply: %s", exc)
        return None
    # A process without a handler answers too (so nobody waits for it).
    if isinstance(message, ReplyMessage) and message.handled:
        return message.reply
    return None
