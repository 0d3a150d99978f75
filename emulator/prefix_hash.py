"""Token ids and chained block hashes of a prompt, as vLLM V1's prefix cache keys it.

vLLM hashes a request's tokens per full block of ``block_size`` tokens, each hash chained to
the previous one (``hash(parent_hash, block_token_ids)``), so a block's hash names the whole
prefix up to its end; a partial last block has no hash and is never cached.

The emulator has no tokenizer: a prompt's tokens are consecutive slices of its rendered text
of ``chars_per_token`` characters (the ``i``-th token is ``text[floor(i*c):floor((i+1)*c)]``),
so there are ``ceil(len(text) / c)`` of them (``Profile.count_tokens``), the same text always
gives the same ids, and a text that extends another shares its tokens up to the shorter end,
as a conversation resent with one more turn does under a real BPE tokenizer.
"""

from __future__ import annotations

import hashlib
import math
import struct
import zlib
from collections.abc import Sequence

BlockHash = bytes
"""A chained block hash (sha256 digest, vLLM's default ``prefix_caching_hash_algo``)."""

_ROOT = b"\x00" * 32
"""The parent of the first block (vLLM seeds it from ``PYTHONHASHSEED``; any constant does)."""


def text_token_ids(text: str, chars_per_token: float) -> list[int]:
    """The emulator's token ids of ``text``: one id per ``chars_per_token`` characters."""
    count = max(1, math.ceil(len(text) / chars_per_token))
    ids: list[int] = []
    for i in range(count):
        piece = text[math.floor(i * chars_per_token) : math.floor((i + 1) * chars_per_token)]
        ids.append(zlib.crc32(piece.encode("utf-8")))
    return ids


def block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[BlockHash, ...]:
    """The chained hashes of every full block of ``token_ids`` (the partial tail has none)."""
    out: list[BlockHash] = []
    parent = _ROOT
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start : start + block_size]
        parent = hashlib.sha256(parent + struct.pack(f"<{block_size}Q", *block)).digest()
        out.append(parent)
    return tuple(out)
