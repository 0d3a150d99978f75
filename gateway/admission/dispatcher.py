"""Admission: submit to the scheduler, park delayed requests on futures, one dispatcher task.

The dispatcher calls ``Scheduler.poll`` whenever something changed that a queued request
could gain from (a delayed submit, a release or submit while someone waits, a cancel, backend
health, a scrape), at ``next_wakeup()``, and every ``poll_interval_s`` while anything is
queued (the scraper's signals change without telling us). Futures are resolved in the
same synchronous step as ``poll``, so a future that is not done is still queued in the
scheduler: cancelling it there is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.admission.run_cuts import RunCuts
from policies.backends import BackendsSnapshot, Health
from policies.engine.scheduler_types import SchedulerStats, Ticket
from policies.fairness.fleet_share import FleetShare, ShareReport
from policies.policy_set import PolicySet
from policies.runs.run import RunEnded, RunStats
from policies.runs.run_state import RunState
from policies.types import Clock, Decision, Ending, Outcome, RequestInfo

log = logging.getLogger("sluicegate.admission")


class RunsLike(Protocol):
    """The agent runs of the decision core (``policies.runs.coordinator.RunCoordinator``):
    what the gateway reads and ends (docs/runs.md)."""

    def end(self, tenant: str, run_id: str, *, cancel: bool = True) -> list[Decision] | None: ...
    def state(self, tenant: str, run_id: str) -> RunState | None: ...
    def take_ends(self) -> Sequence[RunEnded]: ...
    def stats(self) -> RunStats: ...


class SchedulerLike(Protocol):
    """The decision core's contract, as docs/ARCHITECTURE.md states it: what crosses it is
    typed (``policies.engine.scheduler.Scheduler`` is the implementation)."""

    @property
    def policy(self) -> PolicySet: ...
    @property
    def runs(self) -> RunsLike: ...

    def submit(self, req: RequestInfo, fleet: BackendsSnapshot) -> Ticket | Decision: ...
    def poll(self, fleet: BackendsSnapshot) -> list[Ticket | Decision]: ...
    def cancel(self, request_id: str) -> bool: ...
    def release(self, ticket: Ticket, ending: Ending) -> None: ...
    def first_token(self, ticket: Ticket) -> None: ...
    def share_report(self) -> ShareReport | None: ...
    def share_merge(self, share: FleetShare | None, failed: ShareReport | None = None) -> None: ...
    def next_wakeup(self) -> float | None: ...
    def retry_after(self, seconds: float | None) -> float: ...
    def stats(self) -> SchedulerStats: ...
    def swap(self, policy: PolicySet) -> None: ...


Result = Ticket | Decision
"""What a submit or poll hands out: a Ticket, or a Decision (DELAY from ``submit`` only,
REJECT from either); a DELAY never leaves ``wait_dispatch``."""


class Admission:
    """Hands out tickets; ``wait_dispatch`` returns None when the client left while queued."""

    def __init__(
        self,
        scheduler: SchedulerLike,
        snapshot: Callable[[], BackendsSnapshot],
        *,
        clock: Clock,
        poll_interval_s: float = 0.02,
        on_poll_result: Callable[[Result], None] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self._snapshot = snapshot
        self._clock = clock
        self._poll_interval_s = poll_interval_s
        self._waiters: dict[str, asyncio.Future[Result]] = {}
        self._wake = asyncio.Event()
        self._on_poll_result = on_poll_result
        self.run_cuts = RunCuts()
        """The calls in flight of each agent run, cut when their run ends (docs/runs.md)."""
        self.on_run_end: Callable[[RunEnded], None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def wake(self) -> None:
        self._wake.set()

    def submit(self, req: RequestInfo, avoid: frozenset[str] = frozenset()) -> Result:
        """The first decision: a Ticket, a REJECT, or a DELAY (then ``wait_dispatch``).
        Backends in ``avoid`` look down to this one decision only."""
        fleet = self._snapshot()
        if avoid:
            fleet = _without(fleet, avoid)
        result = self.scheduler.submit(req, fleet)
        if self._waiters or isinstance(result, Decision) or req.run is not None:
            # A Ticket at once with nobody queued changes nothing the dispatcher could act
            # on: no wake-up, no extra poll per request. A call of an agent run may have
            # set a run's deadline: the dispatcher's next wake-up is read again.
            self._wake.set()
        return result

    async def wait_dispatch(self, delay: Decision, gone: asyncio.Future[None]) -> Result | None:
        """Wait for a delayed request's Ticket or final REJECT; None if ``gone`` fired first."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiters[delay.request_id] = future
        try:
            waits: set[asyncio.Future[Result] | asyncio.Future[None]] = {future, gone}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._abandon(delay.request_id, future)
            raise
        if gone.done():
            # Also covers a dispatch in the same instant: the slot goes straight back.
            self._abandon(delay.request_id, future)
            return None
        self._waiters.pop(delay.request_id, None)
        return future.result()

    def _abandon(self, request_id: str, future: asyncio.Future[Result]) -> None:
        self._waiters.pop(request_id, None)
        if future.done() and not future.cancelled():
            result = future.result()
            if isinstance(result, Ticket):
                self.release(result, Ending(Outcome.CANCELLED))
            return
        future.cancel()
        self.scheduler.cancel(request_id)
        self._wake.set()

    def release(self, ticket: Ticket, ending: Ending) -> None:
        self.scheduler.release(ticket, ending)
        if self._waiters or ticket.request.run is not None:
            # freed capacity matters only to someone queued; a run's idle timer restarts
            self._wake.set()
        self._report_run_ends()  # a closing run completes with its last call

    def first_token(self, ticket: Ticket) -> None:
        """A streamed response's first token came back: room may have opened for the
        prefill backlog bound, which matters only to someone queued."""
        self.scheduler.first_token(ticket)
        if self._waiters:
            self._wake.set()

    def poll_once(self) -> None:
        for result in self.scheduler.poll(self._snapshot()):
            if self._on_poll_result is not None:
                self._on_poll_result(result)
            self._hand_out(result)
        self._report_run_ends()

    def _hand_out(self, result: Result) -> None:
        future = self._waiters.pop(result.request_id, None)
        if future is not None and not future.done():
            future.set_result(result)
        elif isinstance(result, Ticket):
            log.warning("ticket %s had no waiter; released", result.request_id)
            self.release(result, Ending(Outcome.CANCELLED))

    def end_run(self, tenant: str, run_id: str, *, cancel: bool = True) -> bool:
        """End ``tenant``'s open run ``run_id``: cancelled (its queued calls refused at once,
        those in flight cut) or, with ``cancel`` False, completed once its calls are done.
        False: no such open run of this tenant."""
        refused = self.scheduler.runs.end(tenant, run_id, cancel=cancel)
        if refused is None:
            return False
        for decision in refused:
            self._hand_out(decision)
        self._report_run_ends()
        self._wake.set()
        return True

    def _report_run_ends(self) -> None:
        for ended in self.scheduler.runs.take_ends():
            self.run_cuts.cut(ended)
            if self.on_run_end is not None:
                self.on_run_end(ended)

    async def run(self) -> None:
        """The dispatcher task: never raises except on cancellation."""
        while True:
            try:
                await self._wait_for_work()
                self._wake.clear()
                self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a policy bug must not stop dispatching for everyone
                log.exception("dispatcher poll failed")

    async def _wait_for_work(self) -> None:
        timeout: float | None = None
        wakeup = self.scheduler.next_wakeup()
        if wakeup is not None:
            timeout = max(0.0, wakeup - self._clock())
        if self._waiters:
            poll = self._poll_interval_s
            timeout = poll if timeout is None else min(timeout, poll)
        # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that arrives
        # as the wake-up fires, and the dispatcher would then outlive the gateway's shutdown
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()


def _without(fleet: BackendsSnapshot, avoid: frozenset[str]) -> BackendsSnapshot:
    views = tuple(
        dataclasses.replace(b, health=Health.DOWN) if b.name in avoid else b for b in fleet.backends
    )
    return BackendsSnapshot(fleet.at, views)
