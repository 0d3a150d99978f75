"""The prefill backlog bound in the tokens an engine computes: its rate scaled to the share
its prefix cache did not serve, each prompt counted by what the backend will not serve."""

from __future__ import annotations

from policies.backends import BackendsSnapshot
from policies.engine.placement import Placement
from policies.engine.prefill_backlog import PrefillBacklog
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.registry import build_policy
from policies.types import PromptBlocks
from tests.unit.policies.helpers import ManualClock, backend, request


def test_the_engine_rate_counts_only_the_prompt_tokens_it_computed() -> None:
    backlog = PrefillBacklog(PrefillBacklogParams(ttft_target_s=0.5))
    cached = backend("c", prefill_tokens_per_s=10_000.0, prefix_cache_hit_rate=0.75)
    plain = backend("p", prefill_tokens_per_s=10_000.0)
    backlog.observe((cached, plain))
    assert backlog.bound("c") == 1_250.0  # 2,500 computed tokens a second x 0.5 s
    assert backlog.bound("p") == 5_000.0  # no hit rate: every prompt token computed


def test_a_prompt_counts_what_its_backend_will_not_serve() -> None:
    clock = ManualClock()
    raw = {
        "cache": {"locality_weight": 1.0},
        "limit": {"type": "fixed", "parameters": {"max_in_flight": 4}},
    }
    policy = build_policy(raw)
    place = Placement(policy, policy.limit.new_state(), clock.now)
    views = (
        backend("b1", kv_cache_tokens=1e6, kv_block_size=16, prefix_cache_hit_rate=0.5),
        backend("b2", kv_cache_tokens=1e6, kv_block_size=16, prefix_cache_hit_rate=0.5),
    )
    place.observe(BackendsSnapshot(at=clock.now, backends=views), clock.now)
    first = request(clock, prompt=168, blocks=PromptBlocks(tuple(range(10)), 16.0))
    assert place.uncached_tokens(views[0], first) == 84  # the model knows nothing: the rate
    place.took("b1", first, 268)
    grown = request(clock, prompt=200, blocks=PromptBlocks(tuple(range(12)), 16.0))
    assert place.uncached_tokens(views[0], grown) == 40  # 160 of it were sent to b1
    assert place.uncached_tokens(views[1], grown) == 100  # nothing sent to b2: the rate
    assert place.prefill is not None
    assert place.prefill.pending_tokens()["b1"] == 84  # its own prompt, as it was then
