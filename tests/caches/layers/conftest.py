"""Fixtures for the layer tests: row factories, a fake clock, database failures."""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from asgiref.sync import async_to_sync
from django.db import OperationalError

from caches.core import FakeClock
from caches.layers import persona_sprite_message
from caches.registry import registry
from tomori.domain.repositories import llms as llms_repo
from tomori.domain.repositories import servers as servers_repo
from tomori.domain.repositories import users as users_repo
from tomori.domain.repositories.llms import LlmRecord
from tomori.domain.repositories.servers import PersonaRecord, ServerRecord
from tomori.domain.repositories.users import UserRecord

T = TypeVar("T")

_ids = itertools.count(100_000_000_000_000_000)


def next_disc_id() -> int:
    """Return a fresh snowflake-sized id."""
    return next(_ids)


@pytest.fixture(autouse=True)
def real_retention_clock() -> None:
    """Prune sprite messages on the real clock (the registry itself is rebuilt per test)."""
    persona_sprite_message.set_retention_clock(time.monotonic)


@pytest.fixture
def clock() -> FakeClock:
    """Drive every layer from a fake clock (the next test rebuilds them)."""
    fake = FakeClock(start=1000.0)
    registry.set_clock(fake)
    return fake


@pytest.fixture
def run() -> Callable[..., Any]:
    """Run an async layer call from a sync test, in this thread's transaction.

    async_to_sync sends the layer's sync_to_async database calls back to the
    test's thread, so `django_assert_num_queries` sees every query.
    """

    def runner(fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return async_to_sync(fn)(*args, **kwargs)

    return runner


@pytest.fixture
def db_down(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, str], None]:
    """Make a repository function raise OperationalError, as a lost database would."""

    def break_(module: Any, name: str) -> None:
        def fail(*_args: Any, **_kwargs: Any) -> Any:
            raise OperationalError("could not connect to server")

        monkeypatch.setattr(module, name, fail)

    return break_


class CallCounter:
    """Counts the calls of a wrapped function."""

    def __init__(self) -> None:
        self.calls = 0


@pytest.fixture
def count_calls(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, str], CallCounter]:
    """Wrap a repository function so a test can count how often a layer reaches it."""

    def wrap(module: Any, name: str) -> CallCounter:
        counter = CallCounter()
        real = getattr(module, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            counter.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
        return counter

    return wrap


@pytest.fixture
def make_server(db: None) -> Callable[..., ServerRecord]:
    """Create servers through the repository."""

    def make(**fields: Any) -> ServerRecord:
        fields.setdefault("server_disc_id", next_disc_id())
        return servers_repo.server_create(**fields)

    return make


@pytest.fixture
def make_persona(db: None) -> Callable[..., PersonaRecord]:
    """Create personas through the repository."""
    names = itertools.count(1)

    def make(server: ServerRecord, **fields: Any) -> PersonaRecord:
        fields.setdefault("name", f"persona {next(names)}")
        return servers_repo.persona_create(server_id=server.id, **fields)

    return make


@pytest.fixture
def persona(
    make_server: Callable[..., ServerRecord],
    make_persona: Callable[..., PersonaRecord],
) -> PersonaRecord:
    """Return the main persona of a new server."""
    return make_persona(make_server(), is_main=True)


@pytest.fixture
def make_configured_server(
    make_server: Callable[..., ServerRecord],
    make_persona: Callable[..., PersonaRecord],
    make_llm: Callable[..., LlmRecord],
) -> Callable[..., ServerRecord]:
    """Create a server with an API key, an LLM and a main persona."""

    def make(**fields: Any) -> ServerRecord:
        server = make_server(**fields)
        servers_repo.model_config_set(
            server_id=server.id, llm_id=make_llm().id, api_key="sk-test"
        )
        make_persona(server, name="Tomori", is_main=True)
        return server

    return make


@pytest.fixture
def make_user(db: None) -> Callable[..., UserRecord]:
    """Create users through the repository."""

    def make(**fields: Any) -> UserRecord:
        fields.setdefault("user_disc_id", next_disc_id())
        return users_repo.user_create(**fields)

    return make


@pytest.fixture
def make_llm(db: None) -> Callable[..., LlmRecord]:
    """Create llms rows through the repository."""
    codenames = itertools.count(1)

    def make(**fields: Any) -> LlmRecord:
        fields.setdefault("provider", "openrouter")
        fields.setdefault("codename", f"model-{next(codenames)}")
        return llms_repo.llm_create(**fields)

    return make
