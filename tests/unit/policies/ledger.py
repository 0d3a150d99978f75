"""Bookkeeping for lifecycle tests: every request must reach exactly one terminal outcome."""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage

from .helpers import ManualClock


@dataclass
class Ledger:
    """Drives a scheduler and records outcomes; raises on a second terminal outcome."""

    scheduler: Scheduler
    clock: ManualClock
    fleet: BackendsSnapshot
    submitted: set[str] = field(default_factory=set)
    terminal: dict[str, str] = field(default_factory=dict)
    delayed: set[str] = field(default_factory=set)
    tickets: dict[str, Ticket] = field(default_factory=dict)

    def end(self, request_id: str, outcome: str) -> None:
        assert request_id not in self.terminal, (
            f"{request_id}: {self.terminal[request_id]} then {outcome}"
        )
        self.terminal[request_id] = outcome

    def take(self, out: Ticket | Decision) -> None:
        if isinstance(out, Ticket):
            assert out.request_id not in self.tickets and out.request_id not in self.terminal
            self.delayed.discard(out.request_id)
            self.tickets[out.request_id] = out
        elif out.decision is DecisionKind.DELAY:
            self.delayed.add(out.request_id)
        else:
            assert out.decision is DecisionKind.REJECT and out.retry_after_s is not None
            self.delayed.discard(out.request_id)
            self.end(out.request_id, "rejected:" + out.reason.value)

    def submit(self, req: RequestInfo) -> None:
        self.submitted.add(req.request_id)
        self.take(self.scheduler.submit(req, self.fleet))

    def poll(self) -> None:
        for out in self.scheduler.poll(self.fleet):
            assert out.request_id in self.delayed, "poll returned a request that was not queued"
            self.take(out)

    def release(self, request_id: str, outcome: Outcome, usage: Usage | None) -> None:
        ticket = self.tickets.pop(request_id)
        self.scheduler.release(ticket, Ending(outcome, usage, latency_s=1.0, ttft_s=0.1))
        self.scheduler.release(ticket, Ending(outcome, usage))  # idempotent
        self.end(request_id, outcome.value)

    def cancel(self, request_id: str) -> None:
        if self.scheduler.cancel(request_id):
            self.delayed.discard(request_id)
            self.end(request_id, "cancelled")

    def drain(self) -> None:
        """Finish everything: release what is in flight, let the rest dispatch or expire."""
        for _ in range(10_000):
            if self.tickets:
                rid = next(iter(self.tickets))
                est = self.tickets[rid].request.estimate
                self.release(rid, Outcome.COMPLETED, Usage(est.prompt_tokens, est.output_tokens))
            elif self.delayed:
                wake = self.scheduler.next_wakeup()
                assert wake is not None, "requests queued but nothing will ever wake them"
                self.clock.now = max(self.clock.now, wake)
            else:
                break
            self.poll()
        assert not self.tickets and not self.delayed

    def assert_clean(self) -> None:
        assert self.terminal.keys() == self.submitted
        st = self.scheduler.stats()
        assert st.queued == 0 and st.in_flight == 0 and st.queued_tokens == 0
        assert st.in_flight_tokens == 0
        assert st.charged_tokens == st.released_tokens
