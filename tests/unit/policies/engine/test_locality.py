"""Locality in placement: a request goes where the scheduler sent its prefix unless another
backend's spare load outweighs it, never to a backend without room; and the score itself."""

from __future__ import annotations

from typing import Any

from policies.backends import BackendsSnapshot
from policies.contracts import BackendLoad
from policies.engine.routing import most_local
from policies.types import PromptBlocks, RequestInfo
from tests.unit.policies.helpers import ManualClock, backend, is_ticket, request, scheduler

LOCAL = {
    "limit": {"type": "fixed", "parameters": {"max_in_flight": 2}},
    "prefill_backlog": {"enabled": False},
    "cache": {"locality_weight": 1.5},
}


def _fleet(clock: ManualClock) -> BackendsSnapshot:
    views = [backend(n, kv_cache_tokens=100_000.0, kv_block_size=16) for n in ("b1", "b2")]
    return BackendsSnapshot(at=clock.now, backends=tuple(views))


def _turn(clock: ManualClock, hashes: tuple[int, ...], **kw: Any) -> RequestInfo:
    blocks = PromptBlocks(hashes, 16.0)
    output = kw.pop("output", 10)
    return request(clock, prompt=16 * len(hashes) + 8, output=output, blocks=blocks, **kw)


def test_a_conversations_next_turn_goes_where_its_prefix_is_though_busier() -> None:
    clock = ManualClock()
    s = scheduler(clock, LOCAL)
    first = s.submit(_turn(clock, (1, 2, 3)), _fleet(clock))
    assert is_ticket(first) and first.backend == "b1"  # both idle: by name
    other = s.submit(_turn(clock, (7,)), _fleet(clock))
    assert is_ticket(other) and other.backend == "b2"  # no prefix anywhere: least loaded
    big = s.submit(_turn(clock, (1, 2, 3, 4, 5)), _fleet(clock))
    assert is_ticket(big) and big.backend == "b1"  # b1 holds 3 of its 5 blocks
    assert big.request.estimate.cached_prompt_tokens == 48


def test_a_full_home_spills_to_the_backend_with_room() -> None:
    clock = ManualClock()
    s = scheduler(clock, LOCAL)
    s.submit(_turn(clock, (1, 2, 3)), _fleet(clock))
    s.submit(_turn(clock, (1, 2, 3, 4)), _fleet(clock))  # b1 now holds its 2
    spilled = s.submit(_turn(clock, (1, 2, 3, 4, 5)), _fleet(clock))
    assert is_ticket(spilled) and spilled.backend == "b2"


def test_without_a_locality_weight_placement_stays_cache_blind() -> None:
    clock = ManualClock()
    s = scheduler(clock, {**LOCAL, "cache": {}})
    s.submit(_turn(clock, (1, 2, 3), output=500), _fleet(clock))
    s.submit(_turn(clock, (7,)), _fleet(clock))  # b1 is the busier
    nxt = s.submit(_turn(clock, (1, 2, 3, 4)), _fleet(clock))
    assert is_ticket(nxt) and nxt.backend == "b2"
    assert nxt.request.estimate.cached_prompt_tokens == 0  # b2 was never sent its prefix


def test_the_score_weighs_the_prefill_saved_against_the_load_in_tokens() -> None:
    b1, b2 = backend("b1"), backend("b2")
    busy, idle = BackendLoad(3, 1000), BackendLoad(1, 250)
    # b1: 1000 + 1.5 * 100 = 1150; b2: 250 + 1.5 * 1000 = 1750: the prefix wins
    assert most_local([(b1, busy, 100), (b2, idle, 1000)], 1.5) is b1
    # b1: 1000 + 1.5 * 600 = 1900 > 1750: the lighter load wins
    assert most_local([(b1, busy, 600), (b2, idle, 1000)], 1.5) is b2
    # equal costs: the fewer requests, then the name
    assert most_local([(b2, BackendLoad(2, 0), 10), (b1, BackendLoad(1, 0), 10)], 1.5) is b1
    assert most_local([(b2, BackendLoad(1, 0), 10), (b1, BackendLoad(1, 0), 10)], 1.5) is b1
    assert most_local([], 1.5) is None


def test_prompts_are_modelled_only_where_something_reads_the_model() -> None:
    from policies.registry import build_policy

    quota = {"type": "tenant_quota", "parameters": {"counts": "computed_tokens"}}
    assert not build_policy({}).models_prefixes  # nothing reads a cached estimate
    assert build_policy({"cache": {"locality_weight": 1}}).models_prefixes
    assert build_policy({"cache": {"fairness_counts": "computed_tokens"}}).models_prefixes
    assert build_policy({"gates": [quota]}).models_prefixes
    blind = {"estimate": "hit_rate", "fairness_counts": "computed_tokens"}
    assert not build_policy({"cache": blind, "gates": [quota]}).models_prefixes
