"""The scheduler's model of each backend's prefix cache, from the requests it sent there.

The approximate prefix scorer of llm-d's router (the inference gateway's ``prefix-cache``
plugin) in one idea: a prompt is a chain of block hashes (``PromptBlocks``; each hash names
the whole prefix up to its block's end), and a backend is assumed to hold the blocks of
the prompts recently sent to it. Per backend, an LRU of block hashes, each weighing the
tokens of its block, bounded by the backend's measured KV capacity
(``BackendView.kv_cache_tokens``): sending a prompt touches its blocks, its first block
last, so that as in vLLM (which frees a request's blocks tail first) a chain is evicted
from its tail and its shared beginning stays. Without a measured capacity no model is
kept: the estimate falls back to the backend's hit rate.

It knows only what this scheduler sent: a prefix sent by another gateway replica, or
straight to the engine, is unknown to it, and blocks the engine evicted early (its cache
also holds running requests' new blocks) are still believed cached. ``usage.cached_tokens``
corrects the charges at release; the model itself learns only from what it sends.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from policies.backends import BackendView
from policies.types import PromptBlocks, RequestInfo


class BackendPrefixes:
    """The blocks one backend is believed to cache: hash -> tokens, oldest first."""

    __slots__ = ("blocks", "tokens")

    def __init__(self) -> None:
        self.blocks: OrderedDict[int, float] = OrderedDict()
        self.tokens = 0.0

    def matched(self, hashes: tuple[int, ...]) -> int:
        """How many of ``hashes``, from the first, are cached (the longest prefix match)."""
        blocks = self.blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def sent(self, prompt: PromptBlocks, capacity_tokens: float) -> None:
        """``prompt`` was sent: its blocks are the youngest, its first the very youngest;
        then the oldest go until the blocks fit ``capacity_tokens``."""
        blocks = self.blocks
        weight = prompt.tokens_per_block
        for h in reversed(prompt.hashes):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = weight
                self.tokens += weight
        while self.tokens > capacity_tokens and blocks:
            _, gone = blocks.popitem(last=False)
            self.tokens -= gone


class PrefixModels:
    """One ``BackendPrefixes`` per backend, by name; owned by the scheduler's placement."""

    __slots__ = ("backends",)

    def __init__(self) -> None:
        self.backends: dict[str, BackendPrefixes] = {}

    def cached_tokens(self, backend: BackendView, req: RequestInfo) -> int | None:
        """The prompt tokens of ``req`` that ``backend``'s prefix cache should serve: its
        longest cached prefix, in whole engine blocks, at most the prompt less one token
        (an engine computes at least the last). None: the model knows nothing (the prompt
        is not hashed, or nothing was sent to that backend yet)."""
        prompt = req.blocks
        known = self.backends.get(backend.name)
        if prompt is None or known is None or not known.blocks:
            return None
        tokens = known.matched(prompt.hashes) * prompt.tokens_per_block
        size = backend.kv_block_size
        whole = int(tokens // size) * size if size else int(tokens)
        return max(0, min(whole, req.estimate.prompt_tokens - 1))

    def sent(self, backend: BackendView, req: RequestInfo) -> None:
        """``req`` was dispatched to ``backend``: its prompt's blocks are cached there now."""
        prompt, capacity = req.blocks, backend.kv_cache_tokens
        if prompt is None or capacity is None or not prompt.hashes:
            return
        known = self.backends.get(backend.name)
        if known is None:
            known = self.backends[backend.name] = BackendPrefixes()
        known.sent(prompt, capacity)

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the backends not in ``names`` (removed from the pool)."""
        kept = set(names)
        for name in [n for n in self.backends if n not in kept]:
            del self.backends[name]
