"""The engine model's prefix cache: chained block hashes, an LRU of freed blocks, counters."""

from __future__ import annotations

from emulator.block_pool import BlockPool
from emulator.engine import Engine, StepResult
from emulator.prefix_hash import block_hashes, text_token_ids
from tests.unit.emulator.test_engine import make_config, run_to_end

BS = 16


def ids(tag: int, n: int) -> list[int]:
    return [tag * 100_000 + i for i in range(n)]


def serve(engine: Engine, req_id: str, tokens: list[int], now: float = 0.0) -> list[StepResult]:
    engine.add(req_id, len(tokens), 2, now, block_hashes=block_hashes(tokens, BS))
    return run_to_end(engine, now)


def test_text_tokens_count_as_the_profile_counts_and_a_longer_text_shares_its_prefix() -> None:
    short = "<|user|>\nhello there, general kenobi\n"
    longer = short + "<|assistant|>\nyou are a bold one\n"
    assert len(text_token_ids(short, 4.0)) == -(-len(short) // 4)
    n = len(short) // 4
    assert text_token_ids(longer, 4.0)[:n] == text_token_ids(short, 4.0)[:n]
    assert text_token_ids(short, 3.5) == text_token_ids(short, 3.5)


def test_only_full_blocks_have_hashes_and_each_names_its_whole_prefix() -> None:
    a = block_hashes(ids(1, 3 * BS + 5), BS)
    assert len(a) == 3
    other_start = ids(2, BS) + ids(1, 3 * BS)[BS:]
    b = block_hashes(other_start, BS)
    assert b[0] != a[0] and b[1] != a[1]  # same tokens in block 1, another parent


def test_a_repeated_prompt_is_served_from_the_cache_and_prefills_only_the_rest() -> None:
    engine = Engine(make_config())
    prompt = ids(1, 4 * BS + 10)
    first = serve(engine, "a", prompt)
    second = serve(engine, "b", prompt, first[-1].ended_at)
    assert sum(s.prefill_tokens for s in first) == len(prompt)
    assert sum(s.prefill_tokens for s in second) == 10
    assert second[-1].finished[0].cached_tokens == 4 * BS
    assert engine.prefix_cache_queries == 2 * len(prompt)
    assert engine.prefix_cache_hits == 4 * BS
    assert second[0].prefix_cache_hits == 4 * BS and second[0].prefix_cache_queries == len(prompt)


def test_a_fully_cached_prompt_still_computes_its_last_block() -> None:
    engine = Engine(make_config())
    prompt = ids(1, 4 * BS)
    serve(engine, "a", prompt)
    second = serve(engine, "b", prompt)
    assert second[-1].finished[0].cached_tokens == 3 * BS
    assert sum(s.prefill_tokens for s in second) == BS


def test_a_grown_conversation_hits_the_blocks_of_its_previous_turn() -> None:
    engine = Engine(make_config())
    turn1 = ids(1, 3 * BS + 7)
    serve(engine, "t1", turn1)
    turn2 = turn1 + ids(3, 2 * BS)
    steps = serve(engine, "t2", turn2)
    assert steps[-1].finished[0].cached_tokens == 3 * BS


def test_a_different_first_block_misses_everything_after_it() -> None:
    engine = Engine(make_config())
    serve(engine, "a", ids(1, 4 * BS))
    steps = serve(engine, "b", ids(2, BS) + ids(1, 4 * BS)[BS:])
    assert steps[-1].finished[0].cached_tokens == 0


def test_a_concurrent_request_shares_the_blocks_of_a_running_one() -> None:
    engine = Engine(make_config(max_num_batched_tokens=512))
    prompt = ids(1, 4 * BS + 1)
    engine.add("a", len(prompt), 50, 0.0, block_hashes=block_hashes(prompt, BS))
    first = engine.step(0.0)
    engine.add("b", len(prompt), 2, first.ended_at, block_hashes=block_hashes(prompt, BS))
    second = engine.step(first.ended_at)
    assert second.prefix_cache_hits == 4 * BS
    assert second.prefill_tokens == 1


def test_the_least_recently_freed_prefix_loses_its_tail_block_first() -> None:
    # 12 usable blocks; a 65-token prompt and its 2 output tokens take 5 blocks, 4 of them
    # full prompt blocks that stay cached once freed.
    engine = Engine(make_config(num_gpu_blocks=13, max_model_len=128))
    old, recent, fresh = ids(1, 4 * BS + 1), ids(2, 4 * BS + 1), ids(3, 4 * BS + 1)
    serve(engine, "old", old)
    serve(engine, "recent", recent)
    serve(engine, "fresh", fresh)  # 4 never-used blocks, then one evicted: old's last
    assert serve(engine, "old-again", old)[-1].finished[0].cached_tokens == 3 * BS


def test_blocks_of_a_running_request_are_never_evicted() -> None:
    engine = Engine(make_config(num_gpu_blocks=13, max_model_len=128))
    held = ids(1, 4 * BS)
    engine.add("held", len(held), 60, 0.0, block_hashes=block_hashes(held, BS))
    now = engine.step(0.0).ended_at
    for i in range(3):  # other prompts cycle through the free blocks meanwhile
        other = ids(10 + i, 4 * BS)
        engine.add(f"o{i}", len(other), 1, now, block_hashes=block_hashes(other, BS))
        while f"o{i}" in engine:
            now = engine.step(now).ended_at
    engine.add("again", len(held), 1, now, block_hashes=block_hashes(held, BS))
    assert engine.step(now).prefix_cache_hits == 3 * BS


def test_a_preempted_request_readmitted_is_not_counted_again() -> None:
    engine = Engine(make_config(num_gpu_blocks=9, max_model_len=128, max_num_batched_tokens=128))
    a, b = ids(1, 3 * BS), ids(2, 3 * BS)
    engine.add("a", len(a), 60, 0.0, block_hashes=block_hashes(a, BS))
    engine.add("b", len(b), 60, 0.0, block_hashes=block_hashes(b, BS))
    steps = run_to_end(engine)
    assert any(s.preempted for s in steps)
    assert engine.prefix_cache_queries == len(a) + len(b)
    assert sum(s.prefix_cache_queries for s in steps) == len(a) + len(b)


def test_without_prefix_caching_nothing_hits_and_nothing_is_counted() -> None:
    engine = Engine(make_config(enable_prefix_caching=False))
    prompt = ids(1, 4 * BS + 3)
    serve(engine, "a", prompt)
    steps = serve(engine, "b", prompt)
    assert steps[-1].finished[0].cached_tokens == 0
    assert engine.prefix_cache_queries == 0 and engine.prefix_cache_hits == 0


def test_cached_blocks_count_as_free_in_the_kv_usage() -> None:
    engine = Engine(make_config())
    serve(engine, "a", ids(1, 4 * BS))
    assert engine.kv_cache_usage == 0.0


def test_the_pool_reuses_uncached_blocks_before_cached_ones() -> None:
    pool = BlockPool(5)
    blocks = pool.allocate(4)
    pool.cache(blocks[:2], [b"h0", b"h1"])
    pool.free(reversed(blocks))
    assert pool.num_free == 4 and pool.num_cached == 2
    again = pool.allocate(2)
    assert set(again) == set(blocks[2:])
    assert pool.longest_hit([b"h0", b"h1"]) == blocks[:2]
    pool.allocate(1)  # the tail block of the cached pair goes first
    assert pool.longest_hit([b"h0", b"h1"]) == blocks[:1]
