"""Fleet mode's wiring: the Redis state of this replica, told how to read and steer the
scheduler, the pool and the dispatcher, and the one-scraper-per-backend share. Imported
only in fleet mode: one replica never loads the Redis client."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.backends.scrape.scraper import MetricsScraper
from gateway.context import GatewayContext
from gateway.replicas.redis_store import FairShareHooks, RedisState, connect
from gateway.replicas.scrape_share import SharedScrapes
from policies.fairness.fleet_share import FleetShare, ShareReport
from policies.shared_mode import SharedMode, for_mode


def join_replicas(
    ctx: GatewayContext,
    scraper: MetricsScraper | None,
    closers: list[Callable[[], Awaitable[None]]],
) -> None:
    """Share this replica's limits through Redis (``ctx.shared``) and, with a scraper, its
    scrapes; the scheduler runs the policy of the state's mode from now on."""
    shared = ctx.shared = _redis_state(ctx)
    if scraper is not None:
        scraper.share = _shared_scrapes(ctx, shared.replica_id, scraper, closers)
    ctx.scheduler.swap(for_mode(ctx.scheduler.policy, shared.mode, shared.replicas))


def _redis_state(ctx: GatewayContext) -> RedisState:
    """The Redis state, swapping the scheduler to its local share on failure."""
    cfg = ctx.runtime.loaded.config.state
    replica = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def info() -> dict[str, Any]:
        stats = ctx.scheduler.stats()
        return {"queued": stats.queued, "in_flight": stats.in_flight}

    def on_mode(mode: SharedMode, replicas: int) -> None:
        if ctx.full_policy is not None:
            ctx.scheduler.swap(for_mode(ctx.full_policy, mode, replicas))

    def in_flight() -> dict[str, int]:
        return dict(ctx.scheduler.stats().in_flight_by_backend)

    def merge_fair_share(share: FleetShare | None, failed: ShareReport | None) -> None:
        ctx.scheduler.share_merge(share, failed)
        ctx.admission.wake()  # a tenant held back may go now, or one may be held

    fair = FairShareHooks(lambda: ctx.scheduler.share_report(), merge_fair_share)
    return RedisState(
        cfg,
        connect(cfg),
        replica_id=replica,
        info=info,
        on_mode=on_mode,
        in_flight=in_flight,
        on_peers=ctx.pool.set_peer_in_flight,
        fair=fair,
        policy=lambda: ctx.full_policy,
    )


def _shared_scrapes(
    ctx: GatewayContext,
    replica: str,
    scraper: MetricsScraper,
    closers: list[Callable[[], Awaitable[None]]],
) -> SharedScrapes:
    """One replica scrapes each backend and publishes what it read."""
    cfg = ctx.runtime.loaded.config.state
    share = SharedScrapes(cfg, connect(cfg), replica, scraper, clock=ctx.clock)
    closers.append(share.aclose)
    return share
