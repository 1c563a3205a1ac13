"""One worker alone: the command names a live worker, the others decline it, answers say who."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from caches import live
from caches.messages import ClearAll, ClearCache, OnWorker, WorkerReply, WorkerSnapshot
from caches.operations import (
    OperationOutcome,
    UnknownWorkerError,
    WorkerContext,
    execute_command,
    make_command_handler,
    on_worker_command,
)


@pytest.fixture
def local_snapshots(settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Live snapshots kept in this process (no Redis), as in the embedded default."""
    settings.REDIS_URL = ""
    live.reset_for_tests()
    for worker_id in ("w1", "w2"):
        live.publish_snapshot(worker_id, WorkerSnapshot(worker_id=worker_id))
    yield
    live.reset_for_tests()


def test_a_live_worker_is_addressed_under_the_commands_own_id(local_snapshots) -> None:  # type: ignore[no-untyped-def]
    inner = ClearCache.issue(cache="user", issued_by="ops")
    command = on_worker_command(inner, "w2")
    assert isinstance(command, OnWorker)
    assert (command.worker_id, command.command, command.id) == ("w2", inner, inner.id)


def test_a_worker_that_is_not_live_is_refused_with_the_live_ones_named(
    local_snapshots,
) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownWorkerError) as error:
        on_worker_command(ClearAll.issue(issued_by="ops"), "w9")
    text = str(error.value)
    assert "worker 'w9' is not live" in text and "live workers: w1, w2" in text


def test_the_handler_declines_a_command_for_another_worker() -> None:
    context = WorkerContext(worker_id="w1")
    handle = make_command_handler(context)
    command = OnWorker.issue(
        worker_id="w2", command=ClearAll.issue(issued_by="o"), issued_by="o"
    )
    assert handle(command) is None
    assert context.commands_run == 0
    # Run directly (no handler to decline it), it fails rather than clears.
    reply = execute_command(command, context=context)
    assert not reply.ok and reply.error == "the command is for worker w2, not w1"


def test_the_handler_runs_a_command_for_this_worker() -> None:
    context = WorkerContext(worker_id="w1")
    command = OnWorker.issue(
        worker_id="w1", command=ClearAll.issue(issued_by="o"), issued_by="o"
    )
    reply = make_command_handler(context)(command)
    assert reply is not None and reply.ok
    assert (reply.op, reply.command_id, context.commands_run) == (
        "clear_all",
        command.id,
        1,
    )


def _outcome(command, *replies: WorkerReply) -> OperationOutcome:  # type: ignore[no-untyped-def]
    return OperationOutcome(command=command, replies=list(replies), timeout=3.0)


def test_the_answer_of_one_worker_is_named_by_it() -> None:
    inner = ClearCache.issue(cache="user", issued_by="o")
    command = OnWorker.issue(worker_id="w2", command=inner, issued_by="o")
    silent = _outcome(command)
    assert silent.summary() == (
        "clear cache user on worker w2: worker w2 did not answer within 3 s "
        "(it may have stopped)"
    )
    done = _outcome(command, WorkerReply(worker_id="w2", ok=True, removed=5))
    assert done.summary() == (
        "clear cache user on worker w2: worker w2 answered, 5 entries removed"
    )
    failed = _outcome(command, WorkerReply(worker_id="w2", ok=False, error="x"))
    assert failed.summary() == "clear cache user on worker w2: worker w2 failed"
    assert failed.lines() == ["worker w2: FAILED: x"]


def test_many_answers_are_grouped_and_failures_kept_apart() -> None:
    command = ClearAll.issue(issued_by="o")
    alike = [WorkerReply(worker_id=f"w{i:02}", ok=True) for i in range(16)]
    assert _outcome(command, *alike).brief_lines(4) == [
        "16 workers ("
        + ", ".join(f"w{i:02}" for i in range(16))
        + "): removed 0 entries"
    ]
    unlike = [WorkerReply(worker_id=f"w{i}", ok=True, removed=i) for i in range(6)]
    broken = WorkerReply(worker_id="wx", ok=False, error="boom")
    lines = _outcome(command, *unlike, broken).brief_lines(4)
    assert lines == [
        "worker wx: FAILED: boom",
        "entries removed per worker: w0 0, w1 1, w2 2, w3 3, w4 4, w5 5",
    ]
    few = unlike[:3]
    assert _outcome(command, *few).brief_lines(4) == _outcome(command, *few).lines()
