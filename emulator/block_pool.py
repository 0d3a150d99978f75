"""vLLM V1's KV block pool with its prefix cache (``vllm/v1/core/block_pool.py``).

Blocks are ids ``1..num_gpu_blocks-1`` (block 0 is vLLM's null block). A block is either held
by sequences (``ref_cnt > 0``) or sits in the free queue. A free block that still carries a
hash stays findable by that hash until it is handed out again: the free queue *is* the
prefix cache's LRU. Freed blocks without a hash go to the front of the queue (reused first);
freed cached blocks go to the back (evicted last); allocation takes from the front and evicts
the hash of whatever it takes. A cache hit on a free block takes it out of the queue, so
blocks in use by running sequences are never evicted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from emulator.prefix_hash import BlockHash


class BlockPool:
    """The blocks of one engine. ``enable_caching`` False: no hash is ever kept."""

    def __init__(self, num_gpu_blocks: int, *, enable_caching: bool = True) -> None:
        self.enable_caching = enable_caching
        self.num_usable = max(1, num_gpu_blocks - 1)
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, self.num_usable + 1))
        self._ref = [0] * (self.num_usable + 1)
        self._hash_of: dict[int, BlockHash] = {}
        self._by_hash: dict[BlockHash, int] = {}

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out (cached ones included: they are evictable)."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._by_hash)

    def longest_hit(self, hashes: Sequence[BlockHash]) -> list[int]:
        """The blocks caching the longest run of ``hashes`` from the first one."""
        hit: list[int] = []
        if not self.enable_caching:
            return hit
        for block_hash in hashes:
            block = self._by_hash.get(block_hash)
            if block is None:
                break
            hit.append(block)
        return hit

    def evictable(self, blocks: Iterable[int]) -> int:
        """How many of ``blocks`` sit in the free queue (touching them uses free blocks)."""
        return sum(1 for b in blocks if self._ref[b] == 0)

    def touch(self, blocks: Iterable[int]) -> None:
        """A sequence takes cached blocks: out of the free queue, one more reference."""
        for block in blocks:
            if self._ref[block] == 0:
                del self._free[block]
            self._ref[block] += 1

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh blocks from the front of the free queue (their hashes are evicted)."""
        if n > len(self._free):
            raise ValueError(f"{n} blocks asked, {len(self._free)} free")
        out: list[int] = []
        for _ in range(n):
            block, _ = self._free.popitem(last=False)
            self._evict(block)
            self._ref[block] = 1
            out.append(block)
        return out

    def cache(self, blocks: Sequence[int], hashes: Sequence[BlockHash]) -> None:
        """Give the ``i``-th block the ``i``-th hash (full blocks only, already computed)."""
        if not self.enable_caching:
            return
        for block, block_hash in zip(blocks, hashes, strict=False):
            if block in self._hash_of:
                continue
            self._hash_of[block] = block_hash
            self._by_hash.setdefault(block_hash, block)

    def free(self, ordered: Iterable[int]) -> None:
        """Drop one reference of each block, the first to be evicted first."""
        uncached: list[int] = []
        for block in ordered:
            self._ref[block] -= 1
            if self._ref[block] > 0:
                continue
            if block in self._hash_of:
                self._free[block] = None  # evicted last: the LRU's young end
            else:
                uncached.append(block)
        for block in reversed(uncached):  # reused first, in the given order
            self._free[block] = None
            self._free.move_to_end(block, last=False)

    def _evict(self, block: int) -> None:
        block_hash = self._hash_of.pop(block, None)
        if block_hash is not None and self._by_hash.get(block_hash) == block:
            del self._by_hash[block_hash]
