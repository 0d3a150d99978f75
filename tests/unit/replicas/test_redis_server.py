"""The test Redis itself: empty, answering, and empty again after a restart."""

from __future__ import annotations

import redis

from tests.redis_server import RedisServer


def test_a_restarted_server_comes_back_empty(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.dbsize() == 0
        client.set("k", "v")
        redis_server.restart()
        assert client.dbsize() == 0
        assert client.config_get("save") == {"save": ""}
    finally:
        client.close()
