"""The scheduler's model of a backend's prefix cache: chained matches, the LRU bound by the
backend's measured KV capacity, eviction from a chain's tail, what it answers in tokens."""

from __future__ import annotations

from policies.backends import BackendView
from policies.engine.prefix_model import BackendPrefixes, PrefixModels
from policies.types import PromptBlocks, RequestInfo, WorkEstimate


def view(name: str = "b", capacity: float | None = 1000.0, block: int | None = None) -> BackendView:
    return BackendView(
        name=name, models=frozenset({"m"}), kv_cache_tokens=capacity, kv_block_size=block
    )


def req(hashes: tuple[int, ...], prompt: int, per_block: float = 10.0) -> RequestInfo:
    blocks = PromptBlocks(hashes, per_block)
    return RequestInfo("r", "t", "i", "m", WorkEstimate(prompt, 5), 0.0, blocks=blocks)


def test_the_match_is_the_longest_run_of_hashes_from_the_first() -> None:
    known = BackendPrefixes()
    known.sent(PromptBlocks((1, 2, 3), 10.0), 1000.0)
    assert known.matched((1, 2, 3, 4)) == 3
    assert known.matched((1, 2, 9, 3)) == 2
    assert known.matched(()) == 0


def test_the_lru_holds_at_most_the_capacity_in_tokens_and_evicts_the_oldest() -> None:
    known = BackendPrefixes()
    known.sent(PromptBlocks((1, 2, 3), 10.0), 50.0)
    known.sent(PromptBlocks((7, 8, 9), 10.0), 50.0)
    assert known.tokens == 50.0 and len(known.blocks) == 5
    assert known.matched((7, 8, 9)) == 3
    assert known.matched((1, 2, 3)) == 2  # the older chain lost its tail, not its start


def test_a_chain_is_evicted_from_its_tail_and_a_resend_makes_it_young() -> None:
    known = BackendPrefixes()
    known.sent(PromptBlocks((1, 2, 3, 4), 10.0), 60.0)
    known.sent(PromptBlocks((5, 6), 10.0), 60.0)
    known.sent(PromptBlocks((1, 2), 10.0), 60.0)  # the shared start used again
    known.sent(PromptBlocks((7,), 10.0), 60.0)
    assert known.matched((1, 2, 3, 4)) == 3  # 4 was the oldest: gone first
    known.sent(PromptBlocks((8,), 10.0), 60.0)
    assert known.matched((1, 2, 3, 4)) == 2  # then 3, before the resent 1 and 2
    assert known.matched((5, 6)) == 2 and known.matched((7,)) == 1


def test_cached_tokens_are_whole_engine_blocks_and_leave_the_last_token() -> None:
    models = PrefixModels()
    b = view(block=16)
    models.sent(b, req((1, 2, 3, 4), 45, per_block=10.0))
    assert models.cached_tokens(b, req((1, 2, 3, 9), 100)) == 16  # 30 tokens: one block
    assert models.cached_tokens(b, req((1, 2, 3, 4), 100)) == 32  # 40 tokens: two blocks
    plain = view(name="p")
    models.sent(plain, req((1, 2, 3, 4), 45))
    assert models.cached_tokens(plain, req((1, 2, 3, 4), 100)) == 40
    assert models.cached_tokens(plain, req((1, 2, 3, 4), 40)) == 39  # never the whole prompt
    assert models.cached_tokens(plain, req((5,), 40)) == 0  # known backend, no match


def test_the_model_knows_nothing_without_blocks_a_send_or_a_measured_capacity() -> None:
    models = PrefixModels()
    b, blind = view(), view(name="blind", capacity=None)
    assert models.cached_tokens(b, req((1,), 50)) is None  # nothing sent yet
    models.sent(blind, req((1, 2), 50))
    assert models.cached_tokens(blind, req((1, 2), 50)) is None  # no capacity: not kept
    models.sent(b, req((1, 2), 50))
    plain = RequestInfo("r", "t", "i", "m", WorkEstimate(50, 5), 0.0)
    assert models.cached_tokens(b, plain) is None  # the prompt was not hashed
    models.sent(b, plain)
    assert models.cached_tokens(b, req((1, 2), 50)) == 20


def test_backends_removed_from_the_pool_are_forgotten() -> None:
    models = PrefixModels()
    models.sent(view("a"), req((1,), 50))
    models.sent(view("b"), req((1,), 50))
    models.keep_only(["b"])
    assert set(models.backends) == {"b"}
    assert models.cached_tokens(view("a"), req((1,), 50)) is None
