"""The request-level event loop of a matrix cell: several tenants, one or more backends,
the production scheduler (``policies.engine.scheduler.Scheduler``) as the gateway.

Each backend is the emulator's engine model and steps on its own. Every request carries
``max_tokens`` = its length (as the live clients send it); its estimate is the gateway's
``TokenEstimator``. A degrade that caps ``max_tokens`` cuts the answer there
(``finish_reason: length``); the client asks for the rest, its prompt the longer by what
came, and the request is done when its whole answer is in (one time to first token).
A tenant whose shape is ``hashed`` sends chat messages
(``chat_clients.py``): the engine gets its prompt's block hashes (its prefix cache serves
what was sent before) and, where the policy keeps a prefix model, the scheduler gets the
gateway's chunk hashes of it, as the live gateway computes them. A refused request comes
back when its Retry-After says; each first return after a refusal is recorded with
whether it was admitted (Must-have 6). At the end of the arrivals a probe sends 100
requests at one instant and keeps the Retry-After of those refused (are any two the
same?); its admitted ones are released at once, unserved.
Stops admitting new requests at ``duration_s``, then drains.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from emulator.profile import Profile
from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.estimate import TokenEstimator
from policies.registry import build_policy
from policies.types import Decision, DecisionKind, Ending, Outcome, RequestInfo, Usage, WorkEstimate
from simulation.engine_adapter import EmulatedBackend, KeptViews
from simulation.event_queue import EventQueue, WakeupAlarm
from simulation.hashed_prompts import HashedPrompt
from simulation.matrix.chat_clients import ChatClient
from simulation.matrix.probe import PROBE_REQUESTS, probe
from simulation.matrix.traffic import Tenant, draw_length
from simulation.ports import EngineRequest, EngineStep, VirtualClock
from simulation.stepping import Stepping, horizon

MODEL = "sim-model"
MAX_ATTEMPTS = 12
"""A client gives up on a request refused this many times (it counts as not completed)."""
DRAIN_LIMIT_S = 7200.0


@dataclass(slots=True)
class Request:
    """One request as its client saw it (clock seconds)."""

    tenant: str
    client: int
    prompt_tokens: int
    output_tokens: int
    stream: bool
    first_submit: float
    attempts: int = 0
    """Attempts of the call under way (a continuation is a new call)."""
    received: int = 0
    """Tokens of the answer already in: calls before this one were cut short by a cap."""
    dispatched: float | None = None
    first_token: float | None = None
    finished: float | None = None
    gave_up_at: float | None = None
    turn: int = 0
    hashed: HashedPrompt | None = None
    """The call's prompt hashes, the engine's and the gateway's (a hashed tenant)."""

    def call_prompt(self) -> int:
        """The prompt tokens of the call under way: a continuation's carries the answer
        so far."""
        return self.hashed.tokens if self.hashed is not None else self.prompt_tokens + self.received


@dataclass(slots=True)
class Return:
    """A client's first return after a refusal: at the Retry-After it was given?"""

    at: float
    on_time: bool
    admitted: bool | None = None


@dataclass(slots=True)
class CellRun:
    requests: list[Request] = field(default_factory=list)
    returns: list[Return] = field(default_factory=list)
    probe_retry_after: list[float] = field(default_factory=list)
    probe_sent: int = 0


def request_lengths(
    t: Tenant, turn: int, context: int, rng: random.Random, max_len: int
) -> tuple[int, int]:
    """(prompt, output) tokens of a client's next request: a conversation's later turn
    holds its ``context`` and one more question; the client drops the oldest context to
    fit the model's length."""
    first = t.shape.prompt_tokens
    output = min(draw_length(t.shape.lengths, rng), max_len - first)
    prompt = context + t.shape.question_tokens if turn else first
    return min(prompt, max_len - output), output


def next_turn(t: Tenant, req: Request) -> tuple[int, int]:
    """(turn, context) of the client's request after ``req``: its conversation's next
    turn, or a new conversation (turn 0) after the last turn or a request given up."""
    turn = req.turn + 1 if req.turn + 1 < t.shape.turns and req.gave_up_at is None else 0
    return turn, req.prompt_tokens + req.output_tokens if turn else 0


def retry_wait(retry_after_s: float | None, attempts: int) -> float:
    """When a refused client comes back: when Retry-After says, else its own backoff."""
    return retry_after_s if retry_after_s else min(30.0, 2.0 ** (attempts - 1))


@dataclass(slots=True)
class _Event:
    what: str
    payload: Any = None


class MatrixSimulation:
    """``tenants`` against ``policy`` in front of ``backends`` engines of ``profile``."""

    def __init__(
        self,
        *,
        tenants: list[Tenant],
        policy: dict[str, Any],
        profile: Profile,
        backends: int,
        duration_s: float,
        seed: int,
        probe: bool = True,
    ) -> None:
        self.clock = VirtualClock()
        self.scheduler = Scheduler(build_policy(policy), clock=self.clock, rng=random.Random(seed))
        self.engines = {
            f"b{i}": EmulatedBackend(profile, name=f"b{i}", model=MODEL) for i in range(backends)
        }
        self._stepping = {name: Stepping(e) for name, e in self.engines.items()}
        self._views = KeptViews(self.engines.values())
        self._tenants = {t.name: t for t in tenants}
        self._profile = profile
        self._chats: dict[tuple[str, int], ChatClient] = {}
        self._duration, self._rng = duration_s, random.Random(seed)
        self._max_len = profile.engine.max_model_len
        self._estimator = TokenEstimator()
        self._events: EventQueue[_Event] = EventQueue()
        self._ids = itertools.count()
        self._open: dict[str, Request] = {}
        self._tickets: dict[str, Ticket] = {}
        self._served: dict[str, int] = {}
        """Each call in flight: the output tokens the engine serves it (a cap may cut them)."""
        self._call_first: dict[str, float] = {}
        """Each call in flight that has its first token: when it came."""
        self._pending_return: dict[str, Return] = {}
        self._alarm = WakeupAlarm()
        self.out = CellRun()
        self._start(tenants, probe)

    @classmethod
    def alone(
        cls,
        tenant: Tenant,
        policy: dict[str, Any],
        profile: Profile,
        backends: int,
        *,
        duration_s: float,
        seed: int,
    ) -> MatrixSimulation:
        """``tenant`` alone in front of the engines, without the Retry-After probe."""
        return cls(
            tenants=[tenant],
            policy=policy,
            profile=profile,
            backends=backends,
            duration_s=duration_s,
            seed=seed,
            probe=False,
        )

    def _start(self, tenants: list[Tenant], probe: bool) -> None:
        for t in tenants:
            rng = random.Random(f"{t.name}-{self._rng.random()}")
            if t.clients:
                for c in range(t.clients):
                    start = rng.uniform(0.0, max(t.think_mean_s, 1.0))
                    self._push(start, "new", (t.name, c, 0, 0))
            else:
                for i, at in enumerate(t.arrivals(self._duration, rng)):
                    self._push(at, "new", (t.name, -1 - i, 0, 0))
        if probe:
            self._push(self._duration, "probe")

    def _push(self, at: float, what: str, payload: Any = None, *, seen: bool = True) -> None:
        self._events.push(at, _Event(what, payload), seen=seen)

    def run(self) -> CellRun:
        while self._events:
            if not self._open and self.clock.now >= self._duration:
                break
            at, event = self._events.pop()
            if at > self._duration + DRAIN_LIMIT_S:
                raise RuntimeError(f"{len(self._open)} requests still open at {at:.0f}s")
            self.clock.now = max(self.clock.now, at)
            self._handle(event)
        return self.out

    def _handle(self, event: _Event) -> None:
        if event.what == "new":
            self._new(*event.payload)
        elif event.what == "retry":
            self._submit(event.payload)
        elif event.what == "step":
            name, step = event.payload
            self._stepping[name].ended()
            self._step_end(step)
            if not step.changed:
                self._kick(name)  # a plain decode step: skip the policy pump (as core.py)
                return
        elif event.what == "probe":
            t = next(iter(self._tenants.values()))
            self.out.probe_retry_after = probe(
                self.scheduler,
                self._snapshot(),
                tenant=t.name,
                model=MODEL,
                prompt_tokens=t.shape.prompt_tokens,
                output_tokens=round(t.shape.lengths.mean),
                now=self.clock.now,
            )
            self.out.probe_sent = PROBE_REQUESTS
        self._pump()

    # -- clients ---------------------------------------------------------------------------

    def _new(self, tenant: str, client: int, turn: int, context: int) -> None:
        if self.clock.now >= self._duration:
            return
        t = self._tenants[tenant]
        prompt, output = request_lengths(t, turn, context, self._rng, self._max_len)
        if t.shape.hashed and client >= 0:
            req = self._chat_request(t, client, turn, output)
        else:
            req = Request(tenant, client, prompt, output, t.shape.stream, self.clock.now)
        req.turn = turn
        self.out.requests.append(req)
        rid = f"{tenant}-{next(self._ids)}"
        self._open[rid] = req
        self._submit(rid)

    def _chat_request(self, t: Tenant, client: int, turn: int, output: int) -> Request:
        chat = self._chats.get((t.name, client))
        if chat is None:
            seed = f"{t.name}/{client}"
            chat = self._chats[(t.name, client)] = ChatClient(t.shape, self._profile, MODEL, seed)
        if turn == 0:
            chat.start()
        hashed = chat.prompt(self._max_len - output)
        req = Request(t.name, client, hashed.tokens, output, t.shape.stream, self.clock.now)
        req.hashed = hashed
        return req

    def _submit(self, rid: str) -> None:
        req = self._open[rid]
        req.attempts += 1
        t = self._tenants[req.tenant]
        prompt, length = req.call_prompt(), req.output_tokens - req.received
        est = self._estimator.output_tokens(prompt, length, None, req.tenant)
        hashed = req.hashed if self.scheduler.policy.models_prefixes else None  # as the gateway
        info = RequestInfo(
            request_id=f"{rid}#{req.attempts}",
            tenant=req.tenant,
            workload_class="interactive",
            model=MODEL,
            estimate=WorkEstimate(prompt, est),
            arrival=self.clock.now,
            weight=t.weight,
            max_tokens=length,
            is_retry=req.attempts > 1,
            session_id=f"{req.tenant}-c{req.client}" if t.shape.turns > 1 else None,
            stream=req.stream,
            blocks=hashed.gateway_blocks if hashed is not None else None,
        )
        self._answer(self.scheduler.submit(info, self._snapshot()))

    def _answer(self, out: Ticket | Decision) -> None:
        rid = out.request_id.rpartition("#")[0]
        ret = self._pending_return.get(rid)
        if isinstance(out, Ticket):
            if ret is not None:
                ret.admitted = True
                del self._pending_return[rid]
            req = self._open[rid]
            if req.dispatched is None:
                req.dispatched = self.clock.now
            tokens = req.output_tokens - req.received
            if (cap := out.decision.degradation.max_tokens) is not None:
                tokens = min(tokens, cap)
            self._tickets[rid] = out
            self._served[rid] = tokens
            blocks = () if req.hashed is None else req.hashed.engine_blocks
            sent = EngineRequest(rid, req.call_prompt(), tokens, blocks)
            self.engines[out.backend].add(sent, self.clock.now)
        elif out.decision is DecisionKind.REJECT:
            if ret is not None:
                ret.admitted = False
                del self._pending_return[rid]
            self._refused(rid, out.retry_after_s)

    def _refused(self, rid: str, retry_after_s: float | None) -> None:
        req = self._open[rid]
        if req.attempts >= MAX_ATTEMPTS:
            req.gave_up_at = self.clock.now
            del self._open[rid]
            self._next(req)
            return
        wait = retry_wait(retry_after_s, req.attempts)
        if retry_after_s:
            self._pending_return[rid] = Return(self.clock.now + wait, on_time=True)
            self.out.returns.append(self._pending_return[rid])
        self._push(self.clock.now + wait, "retry", rid)

    def _next(self, req: Request) -> None:
        """The client's next request: the conversation's next turn, or after think time."""
        t = self._tenants[req.tenant]
        if req.client < 0:
            return  # open loop: arrivals are drawn up front
        turn, context = next_turn(t, req)
        if turn and (chat := self._chats.get((req.tenant, req.client))) is not None:
            chat.answered(req.output_tokens)
        at = self.clock.now + t.think_s(self._rng)
        self._push(at, "new", (req.tenant, req.client, turn, context))

    def _continue(self, req: Request) -> None:
        """The answer was cut short (``finish_reason: length`` under a degrade's cap): the
        client asks at once for the rest, its context the longer by what it got."""
        if req.hashed is not None:
            chat = self._chats[(req.tenant, req.client)]
            req.hashed = chat.continued(req.received)
        req.attempts = 0
        rid = f"{req.tenant}-{next(self._ids)}"
        self._open[rid] = req
        self._submit(rid)

    # -- the gateway and the engines -------------------------------------------------------

    def _step_end(self, step: EngineStep) -> None:
        now = self.clock.now
        for rid in step.first_token:
            req = self._open[rid]
            self._call_first[rid] = now
            if req.first_token is None:  # a continuation's first token is not the answer's
                req.first_token = now
            if req.stream:
                self.scheduler.first_token(self._tickets[rid])
        for rid in step.finished:
            req = self._open.pop(rid)
            ticket = self._tickets.pop(rid)
            served = self._served.pop(rid)
            if req.first_token is None:
                req.first_token = now
            usage = Usage(prompt_tokens=req.call_prompt(), completion_tokens=served)
            self._estimator.observe(MODEL, 0, usage, flow=req.tenant)
            first_at = self._call_first.pop(rid, now)
            ttft = first_at - ticket.dispatched_at if req.stream else None
            self.scheduler.release(
                ticket,
                Ending(Outcome.COMPLETED, usage, ttft_s=ttft, latency_s=now - ticket.dispatched_at),
            )
            req.received += served
            if req.received < req.output_tokens:
                self._continue(req)
                continue
            req.finished = now
            self._next(req)

    def _pump(self) -> None:
        for out in self.scheduler.poll(self._snapshot()):
            self._answer(out)
        for name in self.engines:
            self._kick(name)
        wake = self._alarm.arm(self.scheduler.next_wakeup(), self.clock.now)
        if wake is not None:
            self._push(wake, "wake")

    def _kick(self, name: str) -> None:
        """Start ``name``'s next step if it is idle and has work."""
        stepping = self._stepping[name]
        if stepping.busy:
            return
        step = stepping.start(self.clock.now, horizon(self._events, self._stepping.values()))
        if step is not None:
            self._push(step.ends_at, "step", (name, step), seen=step.changed)

    def _snapshot(self) -> BackendsSnapshot:
        return self._views.snapshot(self.clock.now)
