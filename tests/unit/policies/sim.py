"""A tiny discrete-event driver for scheduler tests: virtual clock, arrivals at given times,
each dispatched request completes after ``service_time(request)`` seconds."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage

from .helpers import ManualClock

ServiceTime = Callable[[RequestInfo], float]
Arrival = tuple[float, Callable[[], RequestInfo]]


@dataclass
class SimResult:
    waits: dict[str, list[float]] = field(default_factory=dict)
    """Queue wait (dispatch - arrival) per tenant, dispatched requests only."""
    outcomes: dict[str, str] = field(default_factory=dict)
    served_tokens: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)


class Sim:
    def __init__(
        self,
        scheduler: Scheduler,
        clock: ManualClock,
        fleet: BackendsSnapshot,
        service: ServiceTime,
        served: Callable[[Ticket], float] | None = None,
    ) -> None:
        """``served``: instead of ``service``, the service time of a dispatched ticket (which
        knows its backend)."""
        self.scheduler, self.clock, self.fleet, self.service = scheduler, clock, fleet, service
        self.served = served
        self.result = SimResult()
        self._seq = itertools.count()
        self._events: list[tuple[float, int, str, object]] = []
        self._wakes: set[float] = set()

    def run(self, arrivals: Iterable[Arrival]) -> SimResult:
        """Drive ``arrivals`` to completion; every request must reach one terminal outcome."""
        for at, make in arrivals:
            self._push(at, "arrive", make)
        while self._events:
            at, _, kind, payload = heapq.heappop(self._events)
            self.clock.now = max(self.clock.now, at)
            self._wakes.discard(at)
            outs = self._handle(kind, payload)
            outs.extend(self.scheduler.poll(self.fleet))
            for out in outs:
                self._record(out)
            wake = self.scheduler.next_wakeup()
            if wake is not None and wake not in self._wakes:
                self._wakes.add(wake)
                self._push(max(wake, self.clock.now), "wake", None)
        return self.result

    def _handle(self, kind: str, payload: object) -> list[Ticket | Decision]:
        if kind == "arrive":
            assert callable(payload)
            out = self.scheduler.submit(payload(), self.fleet)
            delayed = isinstance(out, Decision) and out.decision is DecisionKind.DELAY
            return [] if delayed else [out]
        if kind == "done":
            assert isinstance(payload, Ticket)
            est = payload.request.estimate
            latency = self.clock.now - payload.dispatched_at
            usage = Usage(est.prompt_tokens, est.output_tokens)
            self.scheduler.release(payload, Ending(Outcome.COMPLETED, usage, latency_s=latency))
            self.result.outcomes[payload.request_id] = "completed"
        return []

    def _record(self, out: Ticket | Decision) -> None:
        r = self.result
        if isinstance(out, Ticket):
            req = out.request
            r.waits.setdefault(req.tenant, []).append(self.clock.now - req.arrival)
            r.served_tokens[req.tenant] = r.served_tokens.get(req.tenant, 0) + req.estimate.total
            took = self.served(out) if self.served is not None else self.service(req)
            self._push(self.clock.now + took, "done", out)
            return
        assert out.decision is DecisionKind.REJECT
        assert out.request_id not in r.outcomes
        r.outcomes[out.request_id] = "rejected"
        r.rejected[out.tenant] = r.rejected.get(out.tenant, 0) + 1

    def _push(self, at: float, kind: str, payload: object) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
