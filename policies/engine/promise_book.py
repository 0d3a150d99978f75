"""Retry-After as a promise of capacity: the book of returns promised and not yet made.

A refused client is told when to come back. For that time to mean something, the capacity
it will need then must not be handed to anyone else in between: every refusal books a
promise (its tenant, when it is due, its cost in tokens) and the capacity that admits new
work is what is left after the book (``outstanding``). The next refusal is told the time
at which capacity covers the earlier promises *and* its own, so k simultaneous refusals
get k increasing times and each finds its capacity there when it returns.

A returning client is matched by its tenant, not by its identity: a retry
(``RequestInfo.is_retry``) of a tenant with a promise already due ``claim``s the earliest
one. Within a tenant the promised capacity is fungible (the same bucket, the same queue),
so the aggregate is exact for the capacity and needs no id the client may not send back.
A promise lapses ``grace`` after its time (``lapse_at``): a client that never returns holds
capacity only that long.

Promises are kept per tenant in order of their due time; their lapse times come in the
same order while the grace is unchanged, so lapsed ones are always at the head of a list.
"""

from __future__ import annotations

from bisect import insort


class PromiseBook:
    """Promised returns by tenant. Every read takes the clock and drops what has lapsed."""

    __slots__ = ("_by_tenant", "_tokens")

    def __init__(self) -> None:
        self._by_tenant: dict[str, list[tuple[float, float, float]]] = {}
        """Per tenant: (due, lapse_at, tokens), sorted by due."""
        self._tokens: dict[str, float] = {}

    def __bool__(self) -> bool:
        return bool(self._by_tenant)

    def book(self, tenant: str, due: float, lapse_at: float, tokens: float) -> None:
        """A refused client of ``tenant`` was told to return at ``due`` needing ``tokens``."""
        promises = self._by_tenant.get(tenant)
        if promises is None:
            promises = self._by_tenant[tenant] = []
        insort(promises, (due, lapse_at, tokens))
        self._tokens[tenant] = self._tokens.get(tenant, 0.0) + tokens

    def outstanding(self, tenant: str, now: float) -> float:
        """Tokens promised to ``tenant``'s clients that have not returned nor lapsed."""
        self._forget_lapsed(tenant, now)
        return self._tokens.get(tenant, 0.0)

    def total(self, now: float) -> float:
        """Tokens promised to every tenant, not returned nor lapsed."""
        total = 0.0
        for tenant in list(self._by_tenant):
            self._forget_lapsed(tenant, now)
            total += self._tokens.get(tenant, 0.0)
        return total

    def due(self, tenant: str, now: float) -> float | None:
        """The tokens of ``tenant``'s earliest promise if it is due at ``now`` (else None);
        a retry of ``tenant`` arriving now is the client it was made to."""
        self._forget_lapsed(tenant, now)
        promises = self._by_tenant.get(tenant)
        if promises is None or promises[0][0] > now:
            return None
        return promises[0][2]

    def claim(self, tenant: str, now: float) -> float | None:
        """Takes ``tenant``'s earliest promise if it is due (its tokens; None: none due)."""
        tokens = self.due(tenant, now)
        if tokens is not None:
            self._drop_head(tenant)
        return tokens

    def _forget_lapsed(self, tenant: str, now: float) -> None:
        promises = self._by_tenant.get(tenant)
        while promises and promises[0][1] < now:
            self._drop_head(tenant)
            promises = self._by_tenant.get(tenant)

    def _drop_head(self, tenant: str) -> None:
        promises = self._by_tenant[tenant]
        tokens = promises.pop(0)[2]
        if promises:
            self._tokens[tenant] -= tokens
        else:  # no float residue left behind
            del self._by_tenant[tenant]
            del self._tokens[tenant]
