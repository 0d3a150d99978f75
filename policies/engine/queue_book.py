"""Bookkeeping of the gateway queue, whatever the fairness policy: entries by request id,
arrival order (oldest age), an expiry heap (deadlines), and work totals (tokens, models).

It also knows, per model, the smallest prompt among the queued requests whose prefill the
placement prices by prompt size alone (no session, no hashed prompt: ``plain``), and how
many others are queued, so that a scan of the queue can tell when the prefill backlog bound,
having refused one plain prompt, refuses every request of the model queued
(``none_smaller``).

Removal is O(1): the arrival deque and the expiry heap drop dead entries lazily, from
their fronts as they are read, and all at once by the rule of ``policies/engine/dead_entries.py``.
Each structure holds every live entry exactly once, so its dead count is its length minus
the live count; memory stays below twice the live entries plus the slack whatever the
dispatch order and wait bound.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator

from policies.contracts import QueuedEntry
from policies.engine.dead_entries import must_rebuild
from policies.types import RequestInfo


class QueueBook:
    def __init__(self) -> None:
        self._entries: dict[str, QueuedEntry] = {}
        self._gate_names: dict[str, tuple[str, ...]] = {}
        self._arrivals: deque[QueuedEntry] = deque()
        self._expiry: list[tuple[float, int, QueuedEntry]] = []
        self.tokens = 0
        """Estimated tokens queued (the work-weighted backlog ``max_queued_tokens`` bounds)."""
        self.computed = 0
        """Of those, the tokens the engines are expected to compute (``computed_total``: the
        uncached prompt and the output): the work the drain rate drains."""
        self.models: dict[str, int] = {}
        """Queued requests per model."""
        self._plain: dict[str, dict[int, int]] = {}
        """Per model: queued plain requests per prompt size."""
        self._plain_sizes: dict[str, list[int]] = {}
        """Per model: a heap of those sizes (a size whose count fell to 0 is dropped when
        it reaches the top)."""
        self._unplain: dict[str, int] = {}
        """Per model: queued requests that are not plain."""

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, request_id: str) -> QueuedEntry | None:
        return self._entries.get(request_id)

    def add(self, entry: QueuedEntry, gate_names: tuple[str, ...]) -> None:
        req = entry.request
        self._entries[req.request_id] = entry
        self._gate_names[req.request_id] = gate_names
        self._arrivals.append(entry)
        heapq.heappush(self._expiry, (entry.expires_at, entry.seq, entry))
        self.tokens += req.estimate.total
        self.computed += req.estimate.computed_total
        self.models[req.model] = self.models.get(req.model, 0) + 1
        if plain(req):
            sizes = self._plain.setdefault(req.model, {})
            size = req.estimate.prompt_tokens
            count = sizes.get(size, 0)
            if count == 0:
                heap = self._plain_sizes.setdefault(req.model, [])
                heapq.heappush(heap, size)
                if must_rebuild(len(heap), len(sizes) + 1):  # sizes gone, still in the heap
                    heap[:] = [*sizes, size]
                    heapq.heapify(heap)
            sizes[size] = count + 1
        else:
            self._unplain[req.model] = self._unplain.get(req.model, 0) + 1

    def remove(self, entry: QueuedEntry) -> tuple[str, ...]:
        """Take ``entry`` out (marks it dead); returns the gates that accepted it."""
        entry.alive = False
        req = entry.request
        del self._entries[req.request_id]
        self.tokens -= req.estimate.total
        self.computed -= req.estimate.computed_total
        left = self.models.get(req.model, 0) - 1
        if left <= 0:
            self.models.pop(req.model, None)
        else:
            self.models[req.model] = left
        if plain(req):
            sizes = self._plain[req.model]
            size = req.estimate.prompt_tokens
            count = sizes[size] - 1
            if count:
                sizes[size] = count
            elif len(sizes) > 1:
                del sizes[size]
            else:
                del self._plain[req.model], self._plain_sizes[req.model]
        else:
            left_unplain = self._unplain[req.model] - 1
            if left_unplain:
                self._unplain[req.model] = left_unplain
            else:
                del self._unplain[req.model]
        live = len(self._entries)
        if must_rebuild(len(self._arrivals), live):
            self._arrivals = deque(e for e in self._arrivals if e.alive)
        if must_rebuild(len(self._expiry), live):
            self._expiry = [item for item in self._expiry if item[2].alive]
            heapq.heapify(self._expiry)
        return self._gate_names.pop(req.request_id)

    def none_smaller(self, req: RequestInfo) -> bool:
        """Whether every request of ``req``'s model queued is plain, with a prompt no
        smaller than ``req``'s (itself plain)."""
        model = req.model
        if self._unplain.get(model, 0) or not plain(req):
            return False
        sizes = self._plain.get(model)
        if not sizes:
            return True
        heap = self._plain_sizes[model]
        while heap[0] not in sizes:
            heapq.heappop(heap)  # a size no longer queued (the heap is not empty: sizes is not)
        return heap[0] >= req.estimate.prompt_tokens

    def held(self) -> int:
        """Entries the arrival deque and the expiry heap hold, dead ones included."""
        return len(self._arrivals) + len(self._expiry)

    def due(self, now: float) -> bool:
        """Whether ``expired(now)`` may yield anything (an expiry at or before ``now``)."""
        return bool(self._expiry) and self._expiry[0][0] <= now

    def expired(self, now: float) -> Iterator[QueuedEntry]:
        """Live entries whose expiry is at or before ``now`` (the caller removes them)."""
        while self._expiry and self._expiry[0][0] <= now:
            _, _, entry = heapq.heappop(self._expiry)
            if entry.alive:
                yield entry

    def next_expiry(self) -> float | None:
        while self._expiry and not self._expiry[0][2].alive:
            heapq.heappop(self._expiry)
        return self._expiry[0][0] if self._expiry else None

    def oldest(self) -> QueuedEntry | None:
        while self._arrivals and not self._arrivals[0].alive:
            self._arrivals.popleft()
        return self._arrivals[0] if self._arrivals else None

    def live(self) -> list[QueuedEntry]:
        """Live entries in arrival order."""
        return [e for e in self._arrivals if e.alive]


def plain(req: RequestInfo) -> bool:
    """Whether the placement prices ``req``'s prefill by its prompt size alone (the
    backend's hit rate, not a prefix model) and places it without a session's home."""
    return req.blocks is None and not req.session_id
