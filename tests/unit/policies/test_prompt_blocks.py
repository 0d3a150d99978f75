"""The prompt's chained chunk hashes: a conversation resent with one more turn shares its
chunks up to what it shared; another model, or another start, shares none."""

from __future__ import annotations

from gateway.metrics.records import canonical_prompt
from policies.prompt_blocks import CHUNK_BYTES, prompt_blocks


def _messages(turns: int) -> list[dict[str, str]]:
    out = [{"role": "system", "content": "you are a careful agent " * 20}]
    for i in range(turns):
        out.append({"role": "user", "content": f"step {i}: read the file and patch it " * 5})
    return out


def test_a_grown_conversation_shares_every_full_chunk_of_the_shorter_one_but_its_end() -> None:
    short, grown = canonical_prompt(_messages(2)), canonical_prompt(_messages(3))
    a, b = prompt_blocks(short, "m", 100), prompt_blocks(grown, "m", 150)
    assert len(a.hashes) == len(short) // CHUNK_BYTES
    shared = (len(short) - 1) // CHUNK_BYTES  # the short one's closing "]" differs
    assert a.hashes[:shared] == b.hashes[:shared]
    assert len(b.hashes) > len(a.hashes)


def test_a_hash_names_its_whole_prefix_and_the_model() -> None:
    one = canonical_prompt(_messages(2))
    other = b"X" + one[1:]  # the first byte differs: no chunk is shared
    a, b = prompt_blocks(one, "m", 100), prompt_blocks(other, "m", 100)
    assert not set(a.hashes) & set(b.hashes)
    assert not set(a.hashes) & set(prompt_blocks(one, "other", 100).hashes)


def test_tokens_per_block_spread_the_estimate_over_the_bytes() -> None:
    text = b"a" * (CHUNK_BYTES * 3 + 10)
    blocks = prompt_blocks(text, "m", 101)
    assert len(blocks.hashes) == 3  # the partial tail has no hash
    assert blocks.tokens_per_block == CHUNK_BYTES * 101 / len(text)
    assert prompt_blocks(b"short", "m", 2).hashes == ()
