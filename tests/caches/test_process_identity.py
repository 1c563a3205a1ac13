"""A process's identity: the kind of process and host:pid, in every origin it writes."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from caches import process_identity
from caches.process_identity import kind_of_command

ORIGIN = re.compile(r"^(?P<kind>[^:]+):(?P<host>[^:]+):(?P<pid>\d+):[0-9a-f]{6}$")


@pytest.fixture(autouse=True)
def restored_identity() -> Iterator[None]:
    saved = process_identity._current
    yield
    process_identity._current = saved


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["manage.py", "runserver"], "admin-web"),
        (["manage.py", "runbot", "--simulate"], "worker"),
        (["manage.py", "shell", "-c", "x"], "manage.py-shell"),
        (["manage.py", "invalidate_cache", "user"], "manage.py-invalidate_cache"),
        (["manage.py"], "manage.py-help"),
    ],
)
def test_manage_py_names_its_kind_from_the_command(argv: list[str], kind: str) -> None:
    assert kind_of_command(argv) == kind


def test_the_origin_names_the_kind_the_host_and_the_pid() -> None:
    me = process_identity.set_kind("admin-web")
    found = ORIGIN.match(me.origin)
    assert found is not None, me.origin
    assert found["kind"] == "admin-web" and int(found["pid"]) == os.getpid()
    assert process_identity.current() is me


def test_a_worker_is_named_by_its_worker_id() -> None:
    me = process_identity.set_kind("worker", name="vm:812:0-1")
    assert me.origin.startswith("worker:vm:812:0-1:")
    assert me.holds_caches


@pytest.mark.parametrize(
    ("kind", "holds"),
    [
        ("admin-web", False),
        ("manage.py-shell", False),
        ("celery-worker", False),
        ("celery-beat", False),
        ("worker", True),
        ("process", True),  # tests, scripts: they may hold caches
    ],
)
def test_only_workers_and_unnamed_processes_hold_caches(kind: str, holds: bool) -> None:
    assert process_identity.set_kind(kind).holds_caches is holds


def test_a_kind_is_one_bounded_word() -> None:
    me = process_identity.set_kind("manage.py-a b\nc" + "x" * 500)
    assert me.kind.startswith("manage.py-a-b-c") and len(me.kind) == 80


def test_a_forked_child_has_its_own_pid_and_token_and_its_parents_kind() -> None:
    parent = process_identity.set_kind("celery-worker")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its identity and leave at once
        os.write(write, process_identity.current().origin.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 1000).decode()
    os.close(read)
    found = ORIGIN.match(child)
    assert found is not None, child
    assert found["kind"] == "celery-worker" and int(found["pid"]) == pid
    assert child != parent.origin
