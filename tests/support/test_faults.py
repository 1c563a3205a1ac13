"""The fault services themselves: a killable Redis and a PostgreSQL proxy that breaks."""

from __future__ import annotations

import psycopg
import pytest
import redis

from tests.support.faults import proxied_url


def test_own_redis_can_be_paused_and_restarted(own_redis) -> None:
    client = redis.Redis.from_url(own_redis.url, socket_timeout=0.3)
    client.set("k", "v")
    own_redis.pause()
    with pytest.raises(redis.TimeoutError):
        client.get("k")
    own_redis.resume()
    own_redis.restart()
    assert redis.Redis.from_url(own_redis.url).get("k") is None


def test_proxy_forwards_refuses_and_freezes(pg_proxy, db) -> None:
    from django.db import connection

    db = connection.settings_dict
    url = proxied_url(
        f"postgresql://{db.get('USER') or 'postgres'}@h/{db['NAME']}", pg_proxy
    )
    with psycopg.connect(url, connect_timeout=2) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    pg_proxy.refuse()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)
    pg_proxy.freeze()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=1)
    pg_proxy.forward()
    with psycopg.connect(url, connect_timeout=2) as conn:
        assert conn.execute("SELECT 2").fetchone() == (2,)
