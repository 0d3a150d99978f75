"""Bookkeeping of the gateway queue, whatever the fairness policy: entries by request id,
arrival order (oldest age), an expiry heap (deadlines), and work totals (tokens, models).

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
        live = len(self._entries)
        if must_rebuild(len(self._arrivals), live):
            self._arrivals = deque(e for e in self._arrivals if e.alive)
        if must_rebuild(len(self._expiry), live):
            self._expiry = [item for item in self._expiry if item[2].alive]
            heapq.heapify(self._expiry)
        return self._gate_names.pop(req.request_id)

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
