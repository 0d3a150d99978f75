"""The Redis side of the fleet's retry budget (``retry_share.py`` says what is shared).

``counted`` runs for every request with no I/O: a first attempt adds to this replica's
count, a retry under a budget returns the rule its admission script must check. ``publish``
sends this replica's first-attempt counts, once every ``peer_sync_interval_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from gateway.config.schema import StateConfig
from gateway.replicas import retry_scripts
from gateway.replicas.retry_share import FirstAttempts, RetryRule, retry_rule
from policies.policy_set import PolicySet
from policies.types import RequestInfo

FRESH_SYNCS = 3
"""A replica's published count is used while younger than this many exchange intervals
(then it stopped publishing: it died or left)."""


class SharedRetries:
    def __init__(
        self,
        cfg: StateConfig,
        client: aioredis.Redis,
        replica_id: str,
        policy: Callable[[], PolicySet | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cfg, self._replica_id = cfg, replica_id
        self._policy, self._clock = policy, clock
        self._admit = client.register_script(retry_scripts.ADMIT_RETRY)
        self._publish = client.register_script(retry_scripts.PUBLISH_FIRSTS)
        self.firsts = FirstAttempts()
        self._window_s = 0.0

    def key(self, name: str) -> str:
        return f"{self._cfg.key_prefix}retry-{name}"

    def counted(self, req: RequestInfo) -> RetryRule | None:
        """Counts a first attempt; for a retry under a budget, the rule to check."""
        rule = retry_rule(self._policy())
        if rule is None:
            return None
        self._window_s = rule.params.window_s
        if req.is_retry:
            return rule
        self.firsts.add(rule.key(req), self._clock(), rule.params.window_s)
        return None

    def admit_call(
        self,
        req: RequestInfo,
        rule: RetryRule,
        quota_keys: list[str],
        quota_args: list[Any],
        lease: bool,
        fence: tuple[str, str],
    ) -> Awaitable[Any]:
        """ADMIT_RETRY for ``req``; ``quota_keys`` and ``quota_args`` are ADMIT's before its
        epoch fence (member first), ``fence`` the epoch key and the epoch last seen."""
        key = rule.key(req)
        firsts = self.firsts.count(key, self._clock(), rule.params.window_s)
        fresh_ms = FRESH_SYNCS * self._cfg.peer_sync_interval_ms
        args = [
            *quota_args,
            rule.window_ms,
            repr(rule.params.ratio),
            repr(rule.floor),
            "1" if lease else "0",
            self._replica_id,
            firsts,
            fresh_ms,
            fence[1],
        ]
        keys = [*quota_keys, self.key(f"retries:{key}"), self.key(f"firsts:{key}"), fence[0]]
        return self._admit(keys=keys, args=args)  # type: ignore[no-any-return]

    async def publish(self, call: Callable[[Awaitable[Any]], Awaitable[Any]]) -> None:
        """This replica's first attempts per key (none to send: no round trip)."""
        if self._window_s <= 0:
            return
        counts = self.firsts.counts(self._clock(), self._window_s)
        if not counts:
            return
        keys = [self.key(f"firsts:{k}") for k in counts]
        window_ms = int(self._window_s * 1000)
        await call(self._publish(keys=keys, args=[self._replica_id, window_ms, *counts.values()]))
