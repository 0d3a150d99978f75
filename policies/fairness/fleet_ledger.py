"""The fleet's fairness ledger, as the shared store keeps it.

Redis runs this rule as one script (``FAIR_SYNC`` in ``gateway/replicas/scripts.py``); the
simulator runs it here. One ``exchange`` per replica and sync:

1. backlog entries (replica, tenant) past their expiry are dropped (a replica that stopped
   reporting stops holding others back);
2. the replica's served virtual time is added to each tenant's counter (a tenant never seen
   starts at ``last``, the largest counter a served tenant had before its service);
3. a tenant the replica reports queued while no replica had it queued is lifted to the
   smallest counter among the queued tenants (``last`` when none is), as the VTC lifts a
   tenant that becomes backlogged, so idle time cannot be banked;
4. the replica's backlog entries are replaced by what it reports, expiring ``ttl_s`` on.

It answers the counters of the tenants the replica reported and of those queued on other
replicas, and which tenants those are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.fairness.fleet_share import ShareReport


@dataclass(frozen=True, slots=True)
class LedgerAnswer:
    counters: dict[str, float]
    elsewhere: dict[str, float]


@dataclass
class FleetLedger:
    ttl_s: float
    counters: dict[str, float] = field(default_factory=dict)
    last: float = 0.0
    backlog: dict[tuple[str, str], float] = field(default_factory=dict)
    """(replica, tenant) -> expiry."""

    def exchange(self, replica: str, report: ShareReport, now: float) -> LedgerAnswer:
        self.backlog = {key: exp for key, exp in self.backlog.items() if exp > now}
        counters = self.counters
        for tenant, served in report.served.items():
            before = counters.get(tenant, self.last)
            counters[tenant] = before + served
            if served > 0 and before > self.last:
                self.last = before
        queued = {tenant for _, tenant in self.backlog}
        floor = min((counters.get(t, self.last) for t in queued), default=self.last)
        for tenant in report.backlogged:
            if tenant not in queued:
                counters[tenant] = max(counters.get(tenant, floor), floor)
        for key in [k for k in self.backlog if k[0] == replica]:
            del self.backlog[key]
        for tenant in report.backlogged:
            self.backlog[(replica, tenant)] = now + self.ttl_s
        elsewhere = {t: counters.get(t, self.last) for r, t in self.backlog if r != replica}
        mine = {t: counters.get(t, self.last) for t in (*report.served, *report.backlogged)}
        return LedgerAnswer({**mine, **elsewhere}, elsewhere)
