"""call_on_loop and run_on_loop: work reaches the loop's thread from anywhere."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator

import pytest

from caches.core.loop import call_on_loop, on_loop_thread, run_on_loop


@pytest.fixture
def loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """Run an event loop on a thread of its own, as the bot worker does."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-loop")
    thread.start()
    try:
        yield loop
    finally:
        asyncio.run_coroutine_threadsafe(_finish_tasks(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


async def _finish_tasks() -> None:
    current = asyncio.current_task()
    await asyncio.gather(*(t for t in asyncio.all_tasks() if t is not current))


def test_without_a_loop_the_call_runs_here() -> None:
    seen: list[str] = []
    call_on_loop(None, seen.append, "now")
    assert seen == ["now"]


def test_from_another_thread_the_call_runs_on_the_loop(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    ran = concurrent.futures.Future[str]()
    call_on_loop(loop_thread, lambda: ran.set_result(threading.current_thread().name))
    assert ran.result(timeout=10) == "test-loop"


def test_a_loop_that_is_not_running_gets_the_call_here() -> None:
    loop = asyncio.new_event_loop()
    try:
        seen: list[int] = []
        call_on_loop(loop, seen.append, 1)
        assert seen == [1]
    finally:
        loop.close()


def test_on_the_loop_itself_the_call_runs_at_once() -> None:
    async def main() -> list[int]:
        seen: list[int] = []
        call_on_loop(asyncio.get_running_loop(), seen.append, 2)
        return seen

    assert asyncio.run(main()) == [2]


def test_run_on_loop_returns_the_result_computed_on_the_loop(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    async def where() -> bool:
        return on_loop_thread(loop_thread)

    assert run_on_loop(loop_thread, where, timeout=10) is True


def test_run_on_loop_gives_up_after_its_timeout(
    loop_thread: asyncio.AbstractEventLoop,
) -> None:
    release = threading.Event()

    async def slow() -> None:
        await asyncio.to_thread(release.wait)

    with pytest.raises(TimeoutError):
        run_on_loop(loop_thread, slow, timeout=0)
    release.set()


def test_run_on_loop_without_a_running_loop_runs_on_a_fresh_one() -> None:
    async def answer() -> int:
        return 42

    assert run_on_loop(None, answer) == 42


def test_run_on_loop_inside_a_running_loop_uses_a_helper_thread() -> None:
    async def name() -> str:
        return threading.current_thread().name

    async def fails() -> None:
        raise LookupError("from the helper")

    async def main() -> str:
        loop = asyncio.get_running_loop()
        with pytest.raises(LookupError):
            run_on_loop(loop, fails)
        return run_on_loop(loop, name)

    assert asyncio.run(main()) == "run-on-loop"
