"""Hopping onto the event loop from other threads (no Django here).

Caches and the discord.py client belong to the event-loop thread (see
``caches.core.bounded``). A bus listener, a command runner or an admin thread
that must touch them hops there with ``call_on_loop`` (fire and forget) or
``run_on_loop`` (wait for a coroutine's result).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    """Return whether the caller runs on ``loop``'s thread."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def call_on_loop(
    loop: asyncio.AbstractEventLoop | None, fn: Callable[..., object], *args: Any
) -> None:
    """Run ``fn(*args)`` on ``loop``'s thread: queued from another thread, else now.

    It runs here, at once, when there is no loop, the loop is not running (a
    callback queued there would never run) or the caller is on it already.
    """
    if loop is None or not loop.is_running() or on_loop_thread(loop):
        fn(*args)
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # closed between the check and the call
        fn(*args)


def run_on_loop(
    loop: asyncio.AbstractEventLoop | None,
    coroutine: Callable[[], Awaitable[T]],
    *,
    timeout: float | None = None,
) -> T:
    """Run ``coroutine()`` on ``loop`` and return its result, from any thread.

    From another thread than a running ``loop``'s, it runs there and this
    waits up to ``timeout`` seconds (``TimeoutError`` past it). Without a
    running loop it runs on a fresh loop here. Called synchronously from inside
    a running loop (where a nested ``asyncio.run`` is impossible and waiting
    would block the loop), it gets a private loop on a helper thread.
    """
    if loop is not None and loop.is_running() and not on_loop_thread(loop):
        future = asyncio.run_coroutine_threadsafe(_awaited(coroutine), loop)
        return future.result(timeout)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(coroutine))
    return _run_on_helper_thread(coroutine)


async def _awaited(coroutine: Callable[[], Awaitable[T]]) -> T:
    return await coroutine()


def _run_on_helper_thread(coroutine: Callable[[], Awaitable[T]]) -> T:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = asyncio.run(_awaited(coroutine))
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, name="run-on-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]  # type: ignore[no-any-return]
