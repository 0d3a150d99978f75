"""N gateway replicas in front of one engine, on a virtual clock, sharing state the way
fleet mode does (docs/fleet.md).

Each replica is the production ``Scheduler``. Two tenants of equal weight stay backlogged:
``solo`` enters through replica 0 only, ``spread`` through every replica in turn (a
round-robin balancer). Every ``peer_sync_s`` the replicas learn the others' requests in
flight (the backend limits count them); every ``fair_share_s`` each replica, at its own
phase, reports to the fleet ledger (``policies/fairness/fleet_ledger.py``, the rule Redis
runs) and merges its answer, each leg taking half of ``redis_latency_s``. The result is the
engine's token share of ``solo`` over the measured window, and how far the engine was held
beyond its ``max_num_seqs``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.profile import Profile
from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.fairness.fleet_ledger import FleetLedger
from policies.fairness.fleet_share import FleetShare, ShareReport, share_of
from policies.registry import build_policy
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage, WorkEstimate
from simulation.engine_adapter import EmulatedBackend
from simulation.event_queue import EventQueue
from simulation.ports import EngineRequest, EngineStep, VirtualClock
from simulation.stepping import Stepping
from simulation.workload import AgentWorkload

MODEL = "sim-model"
TENANTS = ("solo", "spread")
POLICY: dict[str, Any] = {"ladder": {"steps": []}, "queue": {"max_wait_s": 3600}}


@dataclass(frozen=True, slots=True)
class FleetSpec:
    profile: Profile
    replicas: int = 3
    fair_share_s: float | None = 0.1
    """None: each replica's fairness is its own (no sync)."""
    redis_latency_s: float = 0.0005
    peer_sync_s: float = 0.1
    scrape_s: float = 0.1
    """How old the engine's signals may be (the gateway scrapes /metrics this often)."""
    poll_s: float = 0.02
    """A replica with work queued polls this often; its own releases and syncs wake it."""
    allowance: float = 1000.0
    clients_per_tenant: int = 0
    """0: three times the engine's ``max_num_seqs`` (both tenants stay backlogged)."""
    prompt_tokens: int = 64
    duration_s: float = 600.0
    warmup_s: float = 60.0
    seed: int = 1


@dataclass(frozen=True, slots=True)
class FleetResult:
    spec: FleetSpec
    served: dict[str, int]
    """Tokens (prompt + output) the engine finished per tenant in the measured window."""
    mean_over_seqs: float
    """The engine's held requests above ``max_num_seqs``, averaged over its steps."""
    max_gap: int
    """The largest gap between the two tenants' tokens served since the window began."""
    window_s: float

    @property
    def tokens_per_s(self) -> float:
        return sum(self.served.values()) / self.window_s

    @property
    def solo_share(self) -> float:
        return self.served["solo"] / max(1, sum(self.served.values()))

    @property
    def fairness_error(self) -> float:
        """How far ``solo``'s share is from 1/2, relative to 1/2."""
        return abs(self.solo_share - 0.5) / 0.5


class FleetSimulation:
    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.clock = VirtualClock()
        self.engine = EmulatedBackend(spec.profile, model=MODEL)
        self.schedulers = [
            Scheduler(build_policy(POLICY), clock=self.clock, rng=random.Random(spec.seed + i))
            for i in range(spec.replicas)
        ]
        self.ledger = FleetLedger(ttl_s=max(3 * (spec.fair_share_s or 1.0), 1.0) + 0.1)
        self._rng = random.Random(spec.seed)
        self._lengths = AgentWorkload(spec.profile.output_lengths)
        self._events: EventQueue[Callable[[], None]] = EventQueue()
        self._ids = itertools.count()
        self._round_robin = itertools.count()
        self._peers = [0] * spec.replicas
        self._open: dict[str, tuple[int, Ticket | None, str, int]] = {}
        """request id -> (replica, ticket once dispatched, tenant, output tokens)."""
        self._stepping = Stepping(self.engine)
        self._view = self.engine.view(0.0)
        self.served = dict.fromkeys(TENANTS, 0)
        self._over: list[int] = []
        self._max_gap = 0

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> FleetResult:
        spec = self.spec
        clients = spec.clients_per_tenant or 3 * spec.profile.engine.max_num_seqs
        for tenant in TENANTS:
            for _ in range(clients):
                self._at(self._rng.uniform(0.0, 0.1), functools.partial(self._send, tenant))
        self._at(0.0, self._peer_sync)
        self._at(0.0, self._scrape)
        self._at(0.0, self._tick)
        if spec.fair_share_s is not None:
            for i in range(spec.replicas):
                phase = spec.fair_share_s * (i + self._rng.random()) / spec.replicas
                self._at(phase, functools.partial(self._fair_sync, i))
        while self._events and self.clock.now < spec.duration_s:
            at, event = self._events.pop()
            self.clock.now = max(self.clock.now, at)
            event()
            self._kick_engine()
        mean_over = sum(self._over) / max(1, len(self._over))
        window = self.clock.now - spec.warmup_s
        return FleetResult(spec, self.served, mean_over, self._max_gap, window)

    def _at(self, at: float, run: Callable[[], None]) -> None:
        self._events.push(at, run)

    def _snapshot(self, replica: int) -> BackendsSnapshot:
        view = dataclasses.replace(self._view, peer_in_flight=self._peers[replica])
        return BackendsSnapshot(at=self.clock.now, backends=(view,))

    def _poll(self, replica: int) -> None:
        for out in self.schedulers[replica].poll(self._snapshot(replica)):
            self._answer(out)

    def _tick(self) -> None:
        order = list(range(self.spec.replicas))
        self._rng.shuffle(order)
        for replica in order:
            self._poll(replica)
        self._at(self.clock.now + self.spec.poll_s, self._tick)

    def _scrape(self) -> None:
        self._view = self.engine.view(self.clock.now)
        self._at(self.clock.now + self.spec.scrape_s, self._scrape)

    def _kick_engine(self) -> None:
        step = self._stepping.start(self.clock.now)
        if step is not None:
            self._at(step.ends_at, lambda: self._step_end(step))

    # -- clients and the engine ------------------------------------------------------------

    def _send(self, tenant: str) -> None:
        n = self.spec.replicas
        replica = 0 if tenant == "solo" else next(self._round_robin) % n
        rid = f"q{next(self._ids)}"
        output = self._lengths.output_tokens(self._rng)
        self._open[rid] = (replica, None, tenant, output)
        mean = round(self.spec.profile.output_lengths.mean)
        req = RequestInfo(
            rid,
            tenant,
            "interactive",
            MODEL,
            WorkEstimate(self.spec.prompt_tokens, mean),
            self.clock.now,
        )
        self._answer(self.schedulers[replica].submit(req, self._snapshot(replica)))

    def _answer(self, out: Ticket | Decision) -> None:
        if isinstance(out, Ticket):
            replica, _, tenant, output = self._open[out.request_id]
            self._open[out.request_id] = (replica, out, tenant, output)
            sent = EngineRequest(out.request_id, self.spec.prompt_tokens, output)
            self.engine.add(sent, self.clock.now)
        elif out.decision is DecisionKind.REJECT:  # not expected: the client asks again
            tenant = self._open.pop(out.request_id)[2]
            self._at(self.clock.now + (out.retry_after_s or 1.0), lambda: self._send(tenant))

    def _step_end(self, step: EngineStep) -> None:
        self._stepping.ended()
        engine = self.engine.engine
        over = engine.num_running + engine.num_waiting - self.spec.profile.engine.max_num_seqs
        if self.clock.now >= self.spec.warmup_s:
            self._over.append(max(0, over))
        for rid in step.finished:
            replica, ticket, tenant, output = self._open.pop(rid)
            assert ticket is not None
            usage = Usage(prompt_tokens=self.spec.prompt_tokens, completion_tokens=output)
            self.schedulers[replica].release(ticket, Ending(Outcome.COMPLETED, usage))
            self._poll(replica)  # its own release wakes the replica's dispatcher
            if self.clock.now >= self.spec.warmup_s:
                self.served[tenant] += usage.total
                gap = abs(self.served["solo"] - self.served["spread"])
                self._max_gap = max(self._max_gap, gap)
            self._send(tenant)  # backlogged: the client asks again at once

    # -- what fleet mode shares ------------------------------------------------------------

    def _peer_sync(self) -> None:
        own = [sum(s.stats().in_flight_by_backend.values()) for s in self.schedulers]
        self._peers = [sum(own) - mine for mine in own]
        self._at(self.clock.now + self.spec.peer_sync_s, self._peer_sync)

    def _fair_sync(self, replica: int) -> None:
        spec = self.spec
        assert spec.fair_share_s is not None
        report = self.schedulers[replica].share_report()
        half = spec.redis_latency_s / 2
        if report is not None:
            self._at(self.clock.now + half, lambda: self._exchange(replica, report))
        self._at(self.clock.now + spec.fair_share_s, lambda: self._fair_sync(replica))

    def _exchange(self, replica: int, report: ShareReport) -> None:
        answer = self.ledger.exchange(f"r{replica}", report, self.clock.now)
        share = share_of(answer.counters, answer.elsewhere, self.spec.allowance)
        half = self.spec.redis_latency_s / 2
        self._at(self.clock.now + half, lambda: self._merge(replica, share))

    def _merge(self, replica: int, share: FleetShare) -> None:
        self.schedulers[replica].share_merge(share)
        self._poll(replica)


def simulate_fleet(spec: FleetSpec) -> FleetResult:
    return FleetSimulation(spec).run()
