"""Replicas sharing the test's real Redis (``redis_server``), and a plain client of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import pytest
import redis.asyncio as aioredis

from gateway.config.schema import StateConfig
from gateway.replicas.redis_store import RedisState, connect
from tests.redis_server import RedisServer


class MakeReplica(Protocol):
    def __call__(self, cfg: StateConfig, replica_id: str, **options: Any) -> RedisState: ...


@pytest.fixture
async def replica(redis_server: RedisServer) -> AsyncIterator[MakeReplica]:
    """``replica(cfg, replica_id, **options)``: a ``RedisState`` on a connection of its own
    (``options`` as ``RedisState`` takes them), closed after the test, Redis resumed first
    should the test have left it paused. A replica a test lets die is closed then too."""
    made: list[RedisState] = []

    def make(cfg: StateConfig, replica_id: str, **options: Any) -> RedisState:
        state = RedisState(cfg, connect(cfg), replica_id=replica_id, **options)
        made.append(state)
        return state

    yield make
    redis_server.resume()
    for state in made:
        await state.aclose()


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """A plain client of the test's Redis (its clock, FLUSHALL), closed after the test."""
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()
