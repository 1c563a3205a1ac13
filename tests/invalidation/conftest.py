"""Fixtures for the invalidation tests: small read-through caches under the real names.

The real layers are written elsewhere; these caches speak the same event
vocabulary (cache names, ops, argument order of /tmp/contracts.md) and load
from the database, so a test can read through them, write, and check that no
cached value differs from the database afterwards.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from caches import bus
from caches.core import MISSING, BoundedTTLCache
from caches.registry import EmergencyPolicy, RegisteredCache, registry
from tomori import models as m

Loader = Callable[[Any], Any]


def _none_or(row: Any, fn: Callable[[Any], Any]) -> Any:
    return None if row is None else fn(row)


# --------------------------------------------------------------- loaders


def load_tomori_state(server_disc_id: int) -> Any:
    server = m.Server.objects.filter(server_disc_id=server_disc_id).first()
    if server is None:
        return None
    config = m.ServerModelConfig.objects.filter(server=server).first()
    personas = m.Persona.objects.filter(server=server).order_by("id")
    return (
        server.id,
        server.tool_use_enabled,
        server.channel_whitelist_enabled,
        _none_or(config, lambda c: (c.llm_id, c.temperature)),
        tuple((p.id, p.name, p.is_main, p.avatar_url, p.llm_id) for p in personas),
    )


def load_user(key: Any) -> Any:
    if isinstance(key, tuple):  # ("bl", server_disc_id, user_disc_id)
        _, server_disc_id, user_disc_id = key
        return m.UserBlacklist.objects.filter(
            server__server_disc_id=server_disc_id, user__user_disc_id=user_disc_id
        ).exists()
    user = m.User.objects.filter(user_disc_id=key).first()
    return _none_or(user, lambda u: (u.username, u.privacy_level, u.language))


def load_whitelist(key: str) -> Any:
    server_disc_id, channel, parent, _roles = key.split(":")
    ids = [int(channel)] + ([int(parent)] if parent != "0" else [])
    rows = m.WhitelistedChannel.objects.filter(
        server__server_disc_id=int(server_disc_id), channel_disc_id__in=ids
    ).order_by("channel_disc_id")
    roles = m.WhitelistedRole.objects.filter(server__server_disc_id=int(server_disc_id))
    enabled = m.Server.objects.filter(
        server_disc_id=int(server_disc_id), channel_whitelist_enabled=True
    ).exists()
    return (
        enabled,
        tuple(
            (
                r.channel_disc_id,
                r.cooldown_type,
                r.cooldown_seconds,
                tuple(r.personas.order_by("id").values_list("name", flat=True)),
            )
            for r in rows
        ),
        tuple(roles.order_by("role_disc_id").values_list("role_disc_id", flat=True)),
    )


def load_channel_llm(key: tuple[int, int]) -> Any:
    server_id, channel = key
    row = m.ChannelLlmOverride.objects.filter(
        server_id=server_id, channel_disc_id=channel
    ).first()
    return _none_or(row, lambda r: r.llm_id)


def load_channel_prompt(key: tuple[int, int]) -> Any:
    server_id, channel = key
    row = m.ChannelPromptOverride.objects.filter(
        server_id=server_id, channel_disc_id=channel
    ).first()
    return _none_or(row, lambda r: (r.prompt, r.mode))


def load_emoji_sticker(server_id: int) -> Any:
    server = m.Server.objects.filter(pk=server_id).first()
    rows = m.ServerExpression.objects.filter(server_id=server_id).order_by("id")
    sync = m.ServerExpressionSync.objects.filter(server_id=server_id).first()
    return (
        _none_or(server, lambda s: (s.emoji_usage_enabled, s.sticker_usage_enabled)),
        tuple((r.kind, r.name) for r in rows),
        _none_or(sync, lambda s: (s.emoji_count, s.sticker_count)),
    )


def load_sprites(persona_id: int) -> Any:
    rows = m.PersonaSprite.objects.filter(persona_id=persona_id).order_by("id")
    return tuple((r.name, r.position, r.image_url) for r in rows)


def load_spotlight(key: Any) -> Any:
    if isinstance(key, int):  # the server's gate
        return m.PersonalSpotlight.objects.filter(server_id=key).exists()
    server_id, user_id, channel = (int(part) for part in key.split(":"))
    row = m.PersonalSpotlight.objects.filter(
        server_id=server_id, user_id=user_id, channel_disc_id=channel
    ).first()
    return _none_or(row, lambda r: r.persona_id)


def load_mcp(server_id: int) -> Any:
    rows = m.GuildMcpServerConfig.objects.filter(server_id=server_id).order_by("id")
    return tuple((r.name, r.url, r.enabled, tuple(r.tool_names)) for r in rows)


def load_st_preset(server_id: int) -> Any:
    presets = m.StPreset.objects.filter(server_id=server_id).order_by("id")
    return tuple(
        (
            p.name,
            p.is_active,
            tuple(p.nodes.order_by("id").values_list("content", "enabled")),
        )
        for p in presets
    )


def load_novelai(server_id: int) -> Any:
    row = m.NovelAiSubscription.objects.filter(server_id=server_id).first()
    return _none_or(row, lambda r: (r.tier, r.context_limit))


def load_llm(llm_id: int) -> Any:
    row = m.Llm.objects.filter(pk=llm_id).first()
    return _none_or(row, lambda r: (r.codename, r.is_default, r.is_active))


def load_preset_avatar(preset_id: int) -> Any:
    row = m.PresetPersona.objects.filter(pk=preset_id).first()
    return _none_or(row, lambda r: (r.avatar_path, r.is_active))


def load_webhook(key: Any) -> Any:
    if isinstance(key, int):  # the channel's webhook
        row = m.ManagedWebhook.objects.filter(channel_disc_id=key).first()
        return _none_or(row, lambda r: r.webhook_disc_id)
    channel, persona_id = (int(part) for part in key.split(":"))
    hook = m.ManagedWebhook.objects.filter(channel_disc_id=channel).first()
    persona = m.Persona.objects.filter(pk=persona_id).first()
    return (
        _none_or(hook, lambda r: r.webhook_disc_id),
        _none_or(persona, lambda p: (p.name, p.avatar_url)),
    )


# --------------------------------------------------------------- ops


def _where(cache: BoundedTTLCache, predicate: Callable[[Any], bool]) -> int:
    return cache.invalidate_where(predicate)


def _whitelist_ops(cache: BoundedTTLCache) -> dict[str, Callable[..., int]]:
    def channel(server_disc_id: int, channel_disc_id: int) -> int:
        # The channel's own entries and its threads' (whose parent it is).
        def hit(key: Any) -> bool:
            server, chan, parent, _ = key.split(":")
            return server == str(server_disc_id) and str(channel_disc_id) in (
                chan,
                parent,
            )

        return _where(cache, hit)

    return {
        "server": lambda s: cache.invalidate_prefix(f"{s}:"),
        "channel": channel,
    }


def _channel_llm_ops(cache: BoundedTTLCache) -> dict[str, Callable[..., int]]:
    return {
        "server": lambda s: _where(cache, lambda k: k[0] == s),
        "channel": lambda s, c: _where(cache, lambda k: k[0] == s and k[1] == c),
    }


def _user_ops(cache: BoundedTTLCache) -> dict[str, Callable[..., int]]:
    return {
        "blacklist": lambda s, u: cache.invalidate(("bl", s, u)),
        "blacklist_server": lambda s: _where(
            cache, lambda k: isinstance(k, tuple) and k[1] == s
        ),
    }


def _spotlight_ops(cache: BoundedTTLCache) -> dict[str, Callable[..., int]]:
    def spotlight(server_id: int, user_id: int | None, channel: int | None) -> int:
        def hit(key: Any) -> bool:
            if not isinstance(key, str):
                return False
            s, u, c = (int(part) for part in key.split(":"))
            return (
                s == server_id
                and (user_id is None or u == user_id)
                and (channel is None or c == channel)
            )

        return cache.invalidate(server_id) + _where(cache, hit)

    return {"spotlight": spotlight}


def _webhook_ops(cache: BoundedTTLCache) -> dict[str, Callable[..., int]]:
    def channel(channel_disc_id: int) -> int:
        return cache.invalidate(channel_disc_id) + cache.invalidate_prefix(
            f"{channel_disc_id}:"
        )

    def persona(persona_id: int) -> int:
        return _where(
            cache, lambda k: isinstance(k, str) and k.endswith(f":{persona_id}")
        )

    return {"channel": channel, "persona": persona}


SPECS: dict[str, tuple[Loader, Callable[[BoundedTTLCache], dict] | None]] = {
    "tomori_state": (load_tomori_state, None),
    "user": (load_user, _user_ops),
    "channel_whitelist": (load_whitelist, _whitelist_ops),
    "channel_llm": (load_channel_llm, _channel_llm_ops),
    "channel_prompt": (
        load_channel_prompt,
        lambda c: {"server": lambda s: _where(c, lambda k: k[0] == s)},
    ),
    "emoji_sticker": (load_emoji_sticker, None),
    "persona_sprite": (load_sprites, None),
    "personal_spotlight": (load_spotlight, _spotlight_ops),
    "guild_mcp_config": (load_mcp, None),
    "st_preset": (load_st_preset, None),
    "novelai_subscription": (load_novelai, None),
    "llm": (load_llm, lambda c: {"reload": c.clear}),
    "preset_avatar": (load_preset_avatar, None),
    "webhook": (load_webhook, _webhook_ops),
}


class TestCaches:
    """Read-through caches registered under the real names for one test."""

    __test__ = False  # not a test class, despite the name

    def __init__(self) -> None:
        self.caches: dict[str, BoundedTTLCache] = {}
        self.loaders: dict[str, Loader] = {}
        for name, (loader, make_ops) in SPECS.items():
            cache: BoundedTTLCache = BoundedTTLCache(name, maxsize=1000, ttl=3600.0)
            ops = make_ops(cache) if make_ops else None
            registry.register(name, cache, policy=EmergencyPolicy.CLEAR, ops=ops)
            self.caches[name] = cache
            self.loaders[name] = loader

    def read(self, name: str, key: Hashable) -> Any:
        """Return the cached value of `key`, loading it from the database on a miss."""
        cache = self.caches[name]
        value = cache.get(key)
        if value is MISSING:
            value = self.loaders[name](key)
            cache.set(key, value)
        return value

    def cached(self, name: str, key: Hashable) -> Any:
        """Return what the cache holds for `key` (MISSING if nothing)."""
        return self.caches[name].get(key)

    def stale(self) -> list[tuple[str, Any, Any, Any]]:
        """Return every cached entry that differs from the database: (cache, key, cached, db)."""
        found = []
        for name, cache in self.caches.items():
            for key, value in cache.items():
                fresh = self.loaders[name](key)
                if value != fresh:
                    found.append((name, key, value, fresh))
        return found


@pytest.fixture
def caches() -> Iterator[TestCaches]:
    """Register the read-through test caches, restoring the registry afterwards."""
    saved = {entry.name: entry for entry in registry.entries()}
    test_caches = TestCaches()
    yield test_caches
    for name in SPECS:
        registry.unregister(name)
    for entry in saved.values():
        _restore(entry)


def _restore(entry: RegisteredCache) -> None:
    registry.register(
        entry.name,
        entry.cache,
        policy=entry.policy,
        invalidatable=entry.invalidatable,
        description=entry.description,
        key_help=entry.key_help,
        parse_key=entry.parse_key,
        ops=entry.ops,
        reload=entry.reload,
    )


@pytest.fixture(autouse=True)
def local_bus() -> Iterator[bus.Bus]:
    """Give each test an in-process bus (no Redis traffic unless a test asks)."""
    local = bus.configure(redis_url="", channel="tomori:test:local")
    yield local
    bus.configure(redis_url="", channel="tomori:test:local").close()


@pytest.fixture
def bus_channel() -> str:
    """Return a Redis channel no other test run publishes on."""
    return f"tomori:test:{uuid.uuid4().hex}"


# --------------------------------------------------------------- rows


class World:
    """Factories for the rows the tests write."""

    def __init__(self) -> None:
        self._next = 1000

    def next_id(self) -> int:
        self._next += 1
        return self._next

    def server(self, **fields: Any) -> m.Server:
        fields.setdefault("server_disc_id", 10**17 + self.next_id())
        return m.Server.objects.create(**fields)

    def persona(self, server: m.Server, **fields: Any) -> m.Persona:
        fields.setdefault("name", f"persona-{self.next_id()}")
        return m.Persona.objects.create(server=server, **fields)

    def user(self, **fields: Any) -> m.User:
        fields.setdefault("user_disc_id", 2 * 10**17 + self.next_id())
        fields.setdefault("username", f"user-{self.next_id()}")
        return m.User.objects.create(**fields)

    def llm(self, **fields: Any) -> m.Llm:
        fields.setdefault("provider", "openrouter")
        fields.setdefault("codename", f"model-{self.next_id()}")
        return m.Llm.objects.create(**fields)


@pytest.fixture
def world() -> World:
    """Return row factories (call them inside a test that has database access)."""
    return World()


@pytest.fixture
def commit(django_capture_on_commit_callbacks: Any) -> Callable[[], Any]:
    """Return a context manager that runs the on-commit callbacks of its block."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


# --------------------------------------------------------------- processes

ROOT = Path(__file__).resolve().parents[2]


def run_in_another_process(
    code: str, *, redis_url: str, channel: str, returncode: int = 0
) -> str:
    """Run `code` in `manage.py shell` against this test database and bus channel."""
    from django.db import connection

    db = connection.settings_dict
    login = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tomori.settings_test",
        "DATABASE_URL": f"postgres://{login}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "TOMORI_BUS_CHANNEL": channel,
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == returncode, done.stderr
    return done.stdout


class RedisProxy:
    """A TCP proxy to Redis whose link the test can cut and restore (an outage)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.allowed = threading.Event()
        self.allowed.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self.allowed.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._open += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(src, dst), daemon=True
                ).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Cut every link and refuse new ones."""
        self.allowed.clear()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def up(self) -> None:
        """Accept links again."""
        self.allowed.set()

    def close(self) -> None:
        self.down()
        self._listener.close()


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[tuple[RedisProxy, str]]:
    """Return a proxy to the test Redis and the URL that goes through it."""
    parsed = urlsplit(redis_url)
    proxy = RedisProxy(parsed.port or 6379)
    yield proxy, urlunsplit(parsed._replace(netloc=f"127.0.0.1:{proxy.port}"))
    proxy.close()
