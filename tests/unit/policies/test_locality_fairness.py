"""Fairness with locality routing, in the scheduler's event-driven simulation: a tenant whose
long contexts sit in two backends' prefix caches and a tenant of uncached prompts, both
backlogged, get the same computed tokens (the fair share charges what the engine computes)
within VTC's bound, wherever the first tenant's prefixes live."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Ticket
from policies.types import PromptBlocks, RequestInfo
from tests.unit.policies.helpers import ManualClock, backend, request, scheduler
from tests.unit.policies.sim import Arrival, Sim

BLOCK = 16
CONTEXT_BLOCKS = 250  # 4,000-token contexts
OUTPUT = 50
PER_TENANT = 300
SLOTS = 2  # per backend

POLICY: dict[str, Any] = {
    "limit": {"type": "fixed", "parameters": {"max_in_flight": SLOTS}},
    "fairness": {"type": "vtc"},
    "queue": {"max_wait_s": 100_000},
    "prefill_backlog": {"enabled": False},
    "headroom": {"reserve_fraction": 0.0},  # VTC's bound alone: no slot kept back
    "ladder": {"steps": []},
}


def _fleet(clock: ManualClock) -> BackendsSnapshot:
    views = (
        backend("b1", kv_cache_tokens=1e6, kv_block_size=BLOCK),
        backend("b2", kv_cache_tokens=1e6, kv_block_size=BLOCK),
    )
    return BackendsSnapshot(at=clock.now, backends=views)


def _arrivals(clock: ManualClock) -> list[Arrival]:
    fresh = itertools.count(10**9)  # every uncached prompt its own hashes

    def context(conv: int, turn: int) -> RequestInfo:
        hashes = tuple(conv * 10_000 + i for i in range(CONTEXT_BLOCKS + turn))
        prompt = BLOCK * len(hashes) + 8
        blocks = PromptBlocks(hashes, float(BLOCK))
        return request(clock, tenant="ctx", prompt=prompt, output=OUTPUT, blocks=blocks)

    def flat() -> RequestInfo:
        blocks = PromptBlocks(tuple(next(fresh) for _ in range(30)), float(BLOCK))
        return request(clock, tenant="flat", prompt=30 * BLOCK + 8, output=OUTPUT, blocks=blocks)

    out: list[Arrival] = []
    for i in range(PER_TENANT):
        out.append((0.0, lambda c=i % 4, t=i // 4: context(c, t)))
        out.append((0.0, flat))
    return out


@pytest.mark.parametrize("locality", [0.0, 1.5])
def test_backlogged_tenants_get_equal_computed_tokens_within_the_vtc_bound(
    locality: float,
) -> None:
    clock = ManualClock(0.0)
    cache = {"fairness_counts": "computed_tokens", "locality_weight": locality}
    s = scheduler(clock, {**POLICY, "cache": cache})
    engines: dict[str, set[int]] = {"b1": set(), "b2": set()}  # what each engine caches
    served: dict[str, int] = {"ctx": 0, "flat": 0}
    dispatched: dict[str, int] = {"ctx": 0, "flat": 0}
    gaps: list[int] = []
    largest = 0

    def service(ticket: Ticket) -> float:
        """The engine's truth: the prompt's blocks it already holds are not computed."""
        nonlocal largest
        req, cached_blocks = ticket.request, engines[ticket.backend]
        assert req.blocks is not None
        hits = next((i for i, h in enumerate(req.blocks.hashes) if h not in cached_blocks), 0)
        cached_blocks.update(req.blocks.hashes)
        computed = req.estimate.prompt_tokens - BLOCK * hits + req.estimate.output_tokens
        largest = max(largest, computed)
        dispatched[req.tenant] += 1
        if max(dispatched.values()) < PER_TENANT:  # both still backlogged
            served[req.tenant] += computed
            gaps.append(abs(served["ctx"] - served["flat"]))
        return 0.01 + 1e-5 * computed

    Sim(s, clock, _fleet(clock), lambda r: 0.0, served=service).run(_arrivals(clock))
    # VTC's bound: a backlogged tenant is never more than about one request's charge per
    # slot behind the other (charges land at dispatch, corrections at release)
    assert max(gaps) <= 2 * SLOTS * 2 * largest
    assert served["ctx"] > 0 and served["flat"] > 0
    assert dispatched == {"ctx": PER_TENANT, "flat": PER_TENANT}
