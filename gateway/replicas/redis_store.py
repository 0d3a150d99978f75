"""Tenant quotas and concurrency leases shared through Redis (or Valkey).

One script call at admission (``ADMIT``) and one at release (``RELEASE``); a heartbeat every
``sync_interval_ms`` registers the replica, learns N and renews the leases this replica holds
(their TTL bounds how long a dead replica's requests keep their slots). Any error or a call
slower than ``command_timeout_ms`` puts the replica in fallback at once: the decision core
enforces its local share (global // N, ``policies.shared_mode.for_mode``), or, with
``on_failure: closed``, quota-gated work is refused here; the heartbeat keeps trying every
``retry_interval_ms`` and rejoins when Redis answers, writing back the leases it took
meanwhile and the releases it could not send. Until every replica has been heard since
(or one lease TTL has passed), it admits through Redis *and* within its local share
(rejoining): a replica still in fallback holds leases Redis does not count yet. An admission
that finds Redis lost its data (another epoch) is a failure like any other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.config.schema import StateConfig
from gateway.replicas import scripts
from gateway.replicas.contract import Grant, Refusal
from gateway.replicas.retry_share import RetryRule
from gateway.replicas.shared_retries import SharedRetries
from policies.fairness.fleet_share import FleetShare, ShareReport, share_of
from policies.gates.quota_params import TenantLimits
from policies.policy_set import PolicySet
from policies.shared_mode import SharedMode, rules
from policies.types import Reason, RequestInfo, Usage

log = logging.getLogger("sluicegate.state")

ModeListener = Callable[[SharedMode, int], None]
"""Called with the new mode and the last known replica count when the mode changes."""

FAIR_COUNTERS_KEEP_MS = 600_000
"""The fleet's fairness counters outlive the last sync by this long (then start again)."""


@dataclass(frozen=True, slots=True)
class FairShareHooks:
    """Fleet fairness: ``report`` takes what this replica served and has queued (None: the
    fairness type shares nothing); ``merge`` hands the fleet's view back (None: fairness
    within this replica; with a report the fleet may not have counted, to send again)."""

    report: Callable[[], ShareReport | None]
    merge: Callable[[FleetShare | None, ShareReport | None], None]


@dataclass(slots=True)
class _Held:
    grant: Grant
    confirmed: bool
    """Redis holds this lease (False: taken in fallback, to be added at the next heartbeat)."""


@dataclass(frozen=True, slots=True)
class _Rejoin:
    """This replica answered again at ``at_ms`` (Redis's clock) after an outage, when it
    last knew of ``expected`` replicas."""

    at_ms: int
    expected: int

    def over(self, replicas: int, oldest_beat_ms: int, now_ms: int, ttl_ms: int) -> bool:
        """Every replica is back: as many as before, each heard after the rejoin (a later
        millisecond: this replica's own beat then too); or one lease TTL has passed (one not
        heard since is dead, as a replica whose heartbeat expires)."""
        back = replicas >= self.expected and oldest_beat_ms > self.at_ms
        return back or now_ms - self.at_ms >= ttl_ms


class StoreLostData(Exception):
    """Redis answered from another epoch than this replica's: it lost the leases."""


@dataclass(frozen=True, slots=True)
class _Settlement:
    grant: Grant
    give_back: int


def connect(cfg: StateConfig) -> aioredis.Redis:
    """The client: timeouts in ms, no retries (a failure is handled, not retried blindly)."""
    password = None
    if cfg.password_env is not None:
        password = os.environ.get(cfg.password_env)
        if password is None:
            raise RuntimeError(f"state.password_env names {cfg.password_env}, which is not set")
    assert cfg.url is not None
    return aioredis.Redis.from_url(
        cfg.url,
        password=password,
        socket_timeout=cfg.command_timeout_ms / 1000,
        socket_connect_timeout=cfg.connect_timeout_ms / 1000,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


class RedisState:
    def __init__(
        self,
        cfg: StateConfig,
        client: aioredis.Redis,
        *,
        replica_id: str,
        info: Callable[[], dict[str, Any]] = dict,
        on_mode: ModeListener | None = None,
        in_flight: Callable[[], Mapping[str, int]] | None = None,
        on_peers: Callable[[dict[str, int]], None] | None = None,
        fair: FairShareHooks | None = None,
        policy: Callable[[], PolicySet | None] = lambda: None,
    ) -> None:
        """``in_flight``: this replica's requests in flight per backend, shared every
        ``peer_sync_interval_ms``; ``on_peers`` gets the other replicas' sums. ``fair``: the
        scheduler's fairness, synced every ``fair_share_interval_ms`` (``fair_share``).
        ``policy``: the full policy, whose ``retry_budget`` Redis then enforces for the fleet."""
        self._cfg = cfg
        self._client = client
        self.replica_id = replica_id
        self._info = info
        self._on_mode = on_mode
        self._in_flight = in_flight
        self._on_peers = on_peers
        self._fair = fair if cfg.fair_share else None
        self._fair_failing = False
        self._timeout_s = cfg.command_timeout_ms / 1000
        self._ttl_ms = int(cfg.lease_ttl_s * 1000)
        self._admit = client.register_script(scripts.ADMIT)
        self._release = client.register_script(scripts.RELEASE)
        self._heartbeat = client.register_script(scripts.HEARTBEAT)
        self._leave = client.register_script(scripts.LEAVE)
        self._peers = client.register_script(scripts.PEERS)
        self._fair_sync = client.register_script(scripts.FAIR_SYNC)
        self.retries = SharedRetries(cfg, client, replica_id, policy)
        self._held: dict[str, _Held] = {}
        self._unsent: list[_Settlement] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._mode = SharedMode.SHARED
        self._rejoin: _Rejoin | None = None
        self.replicas = cfg.initial_replicas
        self.failures = 0
        self.rebuilds = 0
        self._started = time.time()
        self._epoch = ""
        """The data generation this replica last saw (a new one: Redis lost its data)."""

    @property
    def mode(self) -> SharedMode:
        return self._mode

    @property
    def held(self) -> int:
        return len(self._held)

    def _key(self, kind: str, name: str = "") -> str:
        return f"{self._cfg.key_prefix}{kind}{':' if name else ''}{name}"

    # -- admission -----------------------------------------------------------------------

    async def admit(self, req: RequestInfo, limits: TenantLimits | None) -> Grant | Refusal | None:
        retry = self.retries.counted(req)
        if limits is None and retry is None:
            return None
        if rules(self._mode).refuses_quota_work and limits is not None:
            return Refusal(Reason.TENANT_QUOTA, self._cfg.retry_interval_ms / 1000)
        member = f"{self.replica_id}:{req.request_id}:{uuid.uuid4().hex[:8]}"
        grant = None if limits is None else Grant(member, req.tenant, limits, req.estimate.total)
        if not rules(self._mode).store_decides:
            return self._unshared(grant)
        try:
            answer = await self._call(self._admit_call(req, member, limits, retry))
            if int(answer[1]) == 4:
                raise StoreLostData
        except Exception as exc:
            self._failed("admit", exc)
            if rules(self._mode).refuses_quota_work and limits is not None:
                return Refusal(Reason.TENANT_QUOTA, self._cfg.retry_interval_ms / 1000)
            return self._unshared(grant)
        granted, why, wait_ms = (int(v) for v in answer)
        if granted:
            if grant is not None:
                self._held[member] = _Held(grant, confirmed=True)
            return grant
        if why == 1:
            return Refusal(Reason.TENANT_CONCURRENCY, None)
        if why == 3:
            return Refusal(Reason.RETRY_BUDGET_EXHAUSTED, wait_ms / 1000)
        return Refusal(Reason.TENANT_QUOTA, wait_ms / 1000)

    def _unshared(self, grant: Grant | None) -> Grant | None:
        """Redis does not answer: the decision core enforces the local share meanwhile."""
        if grant is not None:
            self._held[grant.member] = _Held(grant, confirmed=False)
        return grant

    def _admit_call(
        self, req: RequestInfo, member: str, limits: TenantLimits | None, retry: RetryRule | None
    ) -> Awaitable[Any]:
        keys = [self._key("lease", req.tenant), self._key("bucket", req.tenant)]
        args: list[Any] = [
            member,
            self._ttl_ms,
            *_limit_args(limits or TenantLimits()),
            req.estimate.total,
        ]
        fence = (self._key("epoch"), self._epoch)
        if retry is not None:
            lease = limits is not None
            return self.retries.admit_call(req, retry, keys, args, lease=lease, fence=fence)
        return self._admit(keys=[*keys, fence[0]], args=[*args, fence[1]])  # type: ignore[no-any-return]

    def release(self, grant: Grant, usage: Usage | None, served: bool) -> None:
        if self._held.pop(grant.member, None) is None:
            return
        give_back = grant.cost if not served else (grant.cost - usage.total if usage else 0)
        settlement = _Settlement(grant, give_back)
        if not rules(self._mode).store_decides:
            self._unsent.append(settlement)
            return
        task = asyncio.ensure_future(self._settle(settlement))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _settle(self, s: _Settlement) -> None:
        try:
            await self._call(self._release_call(s))
        except Exception as exc:
            self._unsent.append(s)
            self._failed("release", exc)

    def _release_call(self, s: _Settlement, client: Any = None) -> Awaitable[Any]:
        tenant, limits = s.grant.tenant, s.grant.limits
        tpm, size = _limit_args(limits)[1:]
        return self._release(  # type: ignore[no-any-return]
            keys=[self._key("lease", tenant), self._key("bucket", tenant)],
            args=[s.grant.member, tpm, size, s.give_back],
            client=client,
        )

    async def _call(self, call: Awaitable[Any]) -> Any:
        async with asyncio.timeout(self._timeout_s):  # not wait_for: it may swallow a cancel
            return await call

    # -- background ----------------------------------------------------------------------

    async def run(self) -> None:
        """Heartbeats, the in-flight exchange, the first-attempt counts and the fairness sync
        until cancelled."""
        peer_s = self._cfg.peer_sync_interval_ms / 1000
        jobs = [self._beats(), self._syncs(self.sync_retries, peer_s)]
        if self._in_flight is not None:
            jobs.append(self._syncs(self.sync_peers, peer_s))
        if self._fair is not None:
            jobs.append(self._syncs(self.sync_fair_share, self._cfg.fair_share_interval_ms / 1000))
        await asyncio.gather(*jobs)

    async def _syncs(self, sync: Callable[[], Awaitable[None]], interval_s: float) -> None:
        """``sync`` every ``interval_s`` until cancelled, while the store decides (not while
        Redis does not answer)."""
        while True:
            if rules(self._mode).store_decides:
                await sync()
            await asyncio.sleep(interval_s)

    async def sync_fair_share(self) -> None:
        """One fairness sync (``FAIR_SYNC``): sends what this replica served and has queued,
        hands the fleet's counters and backlog to the scheduler."""
        assert self._fair is not None
        report = self._fair.report()
        if report is None:
            return
        backlog_ttl_ms = _backlog_ttl_ms(self._cfg)
        args: list[str | int | float] = [
            self.replica_id,
            backlog_ttl_ms,
            FAIR_COUNTERS_KEEP_MS,
            len(report.served),
        ]
        for tenant, served in report.served.items():
            args += [tenant, repr(served)]
        args += sorted(report.backlogged)
        keys = [self._key("fair-counters"), self._key("fair-backlog"), self._key("fair-last")]
        try:
            flat = await self._call(self._fair_sync(keys=keys, args=args))
        except Exception as exc:
            self._fair_failed(report, exc)
            return
        if self._fair_failing:
            self._fair_failing = False
            log.warning("shared state: the fairness sync answers again; fair share across replicas")
        elsewhere_count = int(flat[0]) * 2 + 1
        pairs = {flat[i].decode(): float(flat[i + 1]) for i in range(1, len(flat), 2)}
        elsewhere = {flat[i].decode(): float(flat[i + 1]) for i in range(1, elsewhere_count, 2)}
        self._fair.merge(share_of(pairs, elsewhere, self._cfg.fair_share_allowance_tokens), None)

    def _fair_failed(self, report: ShareReport, exc: BaseException) -> None:
        """Fairness alone degrades to this replica's own (its report is kept for the next
        sync); the limits stay shared: a call that fails for them puts them in fallback."""
        assert self._fair is not None
        self.failures += 1
        self._fair.merge(None, report)
        if not self._fair_failing:
            self._fair_failing = True
            log.warning(
                "shared state: Redis fairness sync failed (%s); fair share within "
                "this replica only until it answers",
                type(exc).__name__,
            )

    async def sync_retries(self) -> None:
        """Publishes this replica's first attempts per retry-budget key."""
        try:
            await self.retries.publish(self._call)
        except Exception as exc:
            self._failed("retry budget exchange", exc)

    async def sync_peers(self) -> None:
        """Shares this replica's in flight per backend; hands on the other replicas' sums
        (kept as last known while Redis does not answer)."""
        assert self._in_flight is not None
        args: list[str | int] = [self.replica_id, self._ttl_ms]
        for backend, count in self._in_flight().items():
            args += [backend, count]
        try:
            flat = await self._call(
                self._peers(keys=[self._key("in-flight"), self._key("replicas")], args=args)
            )
        except Exception as exc:
            self._failed("in-flight exchange", exc)
            return
        peers = {flat[i].decode(): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        if self._on_peers is not None:
            self._on_peers(peers)

    async def _beats(self) -> None:
        """Heartbeats until cancelled; faster until the replica is back in shared mode."""
        while True:
            await self.beat()
            interval = (
                self._cfg.sync_interval_ms
                if self._mode is SharedMode.SHARED
                else self._cfg.retry_interval_ms
            )
            await asyncio.sleep(interval / 1000)

    async def beat(self) -> None:
        """One heartbeat; on success after a failure (or when Redis lost its data), the
        replica rejoins, and it is shared again once every replica is back."""
        held = list(self._held.values())
        keys = [self._key("replicas"), self._key("replica-info"), self._key("epoch")]
        keys += [self._key("lease", h.grant.tenant) for h in held]
        # back from an outage, every lease is written: those Redis held may have expired
        renew = rules(self._mode).store_decides
        flags = "".join("r" if h.confirmed and renew else "a" for h in held)
        info = json.dumps(
            {
                "started": self._started,
                "mode": self._mode.value,
                "leases": len(held),
                **self._info(),
            }
        )
        args: list[str | int] = [self.replica_id, self._ttl_ms, info, flags, self._epoch]
        args += [h.grant.member for h in held]
        try:
            answer = await self._call(self._heartbeat(keys=keys, args=args))
            await self._flush_unsent()
        except Exception as exc:
            self._failed("heartbeat", exc)
            return
        for h in held:
            h.confirmed = True
        count, rebuilt, now_ms, oldest_ms = (int(answer[i]) for i in (0, 1, 3, 4))
        count = max(1, count)
        known, self._epoch = self._epoch, answer[2].decode()
        lost = bool(rebuilt and known)
        if lost:
            self.rebuilds += 1
            log.warning(
                "shared state: Redis had lost its data; rebuilt from this replica's %d leases",
                len(held),
            )
        if self._rejoin is None and (lost or not rules(self._mode).store_decides):
            self._rejoin = _Rejoin(now_ms, self.replicas)
        if self._rejoin is not None and self._rejoin.over(count, oldest_ms, now_ms, self._ttl_ms):
            self._rejoin = None
        if self._rejoin is None:
            self._set_mode(SharedMode.SHARED, count)
        else:
            self._set_mode(SharedMode.REJOINING, max(count, self._rejoin.expected))

    async def _flush_unsent(self) -> None:
        if not self._unsent:
            return
        unsent, self._unsent = self._unsent, []
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for s in unsent:
                    await self._release_call(s, client=pipe)  # buffered, not sent
                await self._call(pipe.execute())
        except Exception:
            self._unsent = unsent + self._unsent
            raise

    def _failed(self, op: str, exc: BaseException) -> None:
        self.failures += 1
        if rules(self._mode).store_decides:
            failed = SharedMode.CLOSED if self._cfg.on_failure == "closed" else SharedMode.FALLBACK
            log.warning(
                "shared state: Redis %s failed (%s); %s%s",
                op,
                type(exc).__name__,
                "refusing quota-gated work"
                if rules(failed).refuses_quota_work
                else f"enforcing the local share of 1/{self.replicas}",
                "; fair share within this replica only" if self._fair else "",
            )
            self._rejoin = None
            self._set_mode(failed, self.replicas)

    def _set_mode(self, mode: SharedMode, replicas: int) -> None:
        """Enters ``mode`` among ``replicas``; the listener hears of a new mode, or of a new
        count where the mode divides the quotas by it."""
        was, counted = self._mode, self.replicas
        self._mode, self.replicas = mode, replicas
        if mode is was and (replicas == counted or not rules(mode).divides_quotas):
            return
        store_decides = rules(mode).store_decides
        if store_decides and not rules(was).store_decides:
            log.warning("shared state: Redis answers again; %d replicas", replicas)
        if mode is SharedMode.REJOINING and mode is not was:
            log.warning(
                "shared state: rejoining; the local share of 1/%d until every replica is back",
                replicas,
            )
        if was is SharedMode.REJOINING and mode is SharedMode.SHARED:
            log.warning("shared state: every replica is back; %d replicas", replicas)
        if not store_decides and self._fair is not None:
            self._fair.merge(None, None)
        if self._on_mode is not None:
            self._on_mode(mode, replicas)

    # -- admin ---------------------------------------------------------------------------

    async def fleet(self) -> dict[str, Any]:
        view: dict[str, Any] = {"mode": self._mode.value, "replica": self.replica_id}
        view.update(replicas=self.replicas, held_leases=len(self._held))
        try:
            view.update(await self._call(self._read_fleet()))
        except Exception as exc:
            view["error"] = f"Redis did not answer: {type(exc).__name__}"
        return view

    async def _read_fleet(self) -> dict[str, Any]:
        client: Any = self._client
        now_s, now_us = await client.time()
        now_ms = now_s * 1000 + now_us // 1000
        members = await client.zrange(self._key("replicas"), 0, -1, withscores=True)
        infos = await client.hgetall(self._key("replica-info"))
        replicas = []
        for name, expiry in members:
            info = json.loads(infos.get(name, b"{}"))
            age_ms = now_ms - (expiry - self._ttl_ms)
            replicas.append({"id": name.decode(), "last_heartbeat_ms_ago": age_ms, **info})
        leases: dict[str, int] = {}
        prefix = self._key("lease", "")
        async for key in client.scan_iter(match=f"{prefix}*", count=200):
            tenant = key.decode()[len(prefix) + 1 :]
            leases[tenant] = await client.zcount(key, now_ms, "+inf")
        return {"members": replicas, "tenant_leases": leases, **await self._read_fair(now_ms)}

    async def _read_fair(self, now_ms: int) -> dict[str, Any]:
        """The fleet's fairness counters and, per tenant, the replicas it is queued on."""
        if self._fair is None:
            return {}
        client: Any = self._client
        counters = await client.hgetall(self._key("fair-counters"))
        entries = await client.zrangebyscore(self._key("fair-backlog"), now_ms, "+inf")
        queued: dict[str, list[str]] = {}
        for entry in entries:
            replica, tenant = entry.decode().split("|", 1)
            queued.setdefault(tenant, []).append(replica)
        fair = {k.decode(): float(v) for k, v in counters.items()}
        return {"fair_share": {"counters": fair, "queued_on": queued}}

    async def aclose(self) -> None:
        for task in list(self._tasks):
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self._call(self._flush_unsent())
            await self._call(
                self._leave(
                    keys=[self._key("replicas"), self._key("replica-info")], args=[self.replica_id]
                )
            )
        except Exception as exc:
            log.warning("shared state: could not leave the fleet cleanly (%s)", type(exc).__name__)
        await self._client.aclose()


def _backlog_ttl_ms(cfg: StateConfig) -> int:
    """How long a replica's backlog entries outlive its last sync: three intervals, and at
    least a second so a replica whose event loop stalls briefly does not drop out (its
    tenants would be lifted as newly queued); a dead replica holds others back no longer."""
    return max(3 * cfg.fair_share_interval_ms, 1000) + cfg.command_timeout_ms


def _limit_args(limits: TenantLimits) -> tuple[int, int, int]:
    """(max_concurrent, tokens_per_minute, bucket size), 0 for none."""
    tpm = limits.tokens_per_minute or 0
    return limits.max_concurrent or 0, tpm, limits.burst_tokens or tpm
