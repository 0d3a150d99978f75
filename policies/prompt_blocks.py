"""A prompt as chained block hashes (``PromptBlocks``) for the scheduler's model of each
backend's prefix cache, without a tokenizer.

The gateway does not tokenize, so blocks are fixed chunks of ``CHUNK_BYTES`` bytes of the
prompt's canonical JSON (the messages, or the completion prompt, as ``prompt_sha256``
hashes them), as llm-d's approximate prefix scorer chunks characters. A conversation
resent with one more turn has the same canonical JSON up to its last shared message, so
it shares every full chunk before it. Chunk ``i``'s hash is the CRC-32 and Adler-32 of all
bytes up to its end (each chunk continues the checksums of the one before, so it names the
whole prefix), seeded with the model's name. ``tokens_per_block`` is the chunk's share of the
estimate's prompt tokens (the estimator's measured characters per token of that model): the
approximation is in it (the JSON's quoting is spread over the tokens like the text) and in
the chunks' edges, which are not the engine's blocks (the scheduler counts only the
engine's whole blocks).
"""

from __future__ import annotations

import zlib

from policies.types import PromptBlocks

CHUNK_BYTES = 64
"""llm-d's default ``hashBlockSize`` (characters): 16 tokens of about 4 characters, vLLM's
GPU block size; a finer grain than an engine's block only sharpens the match."""


def prompt_blocks(canonical: bytes, model: str, prompt_tokens: int) -> PromptBlocks:
    """The chained hashes of every full chunk of ``canonical`` (the partial tail has none);
    ``prompt_tokens``: the estimate of the prompt's tokens, spread evenly over its bytes."""
    seed = model.encode()
    crc, adler = zlib.crc32(seed), zlib.adler32(seed)
    view = memoryview(canonical)
    hashes: list[int] = []
    for start in range(0, len(canonical) - CHUNK_BYTES + 1, CHUNK_BYTES):
        chunk = view[start : start + CHUNK_BYTES]
        crc, adler = zlib.crc32(chunk, crc), zlib.adler32(chunk, adler)
        hashes.append(crc << 32 | adler)
    return PromptBlocks(tuple(hashes), CHUNK_BYTES * prompt_tokens / max(1, len(canonical)))
