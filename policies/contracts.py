"""One narrow contract per role. Policy objects hold parameters only; their mutable state
comes from ``new_state()`` and is owned by the scheduler, so a config swap never loses it.

Roles:
- ``Gate``: every request passes the chain before it may queue or dispatch.
- ``Fairness``: holds the queued requests and picks which one dispatches next.
- ``Discipline``: decides whether a request leaving the queue is dropped instead (CoDel).
- ``Limit``: whether a backend may take one more request from the gateway now.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, TypeVar, cast

from mypy_extensions import mypyc_attr

from policies.backends import BackendView
from policies.fairness.fleet_share import FleetShare, ShareReport
from policies.native.quick_init import quick_init
from policies.native.read_only import read_only
from policies.params import NoParams, Params
from policies.types import DecisionKind, Degradation, Ending, FlowKey, Reason, RequestInfo, Usage

S = TypeVar("S")


P = TypeVar("P", bound=Params)


class QueuedEntry:
    """A delayed request inside the gateway queue. ``alive`` is cleared when it leaves,
    so structures that hold it may drop it lazily; ``gen`` invalidates stale heap copies.

    A plain class (equal only to itself), so that mypyc builds it natively: a native
    dataclass is built through the interpreted ``__init__`` that ``dataclasses`` generates."""

    __slots__ = (
        "alive",
        "degradation",
        "enqueued_at",
        "expires_at",
        "expiry_reason",
        "flow",
        "gen",
        "kind",
        "request",
        "seq",
        "shadowed",
    )

    def __init__(
        self,
        request: RequestInfo,
        kind: DecisionKind,
        degradation: Degradation,
        shadowed: tuple[str, ...],
        enqueued_at: float,
        expires_at: float,
        expiry_reason: Reason,
        seq: int,
        flow: FlowKey,
        alive: bool = True,
        gen: int = 0,
    ) -> None:
        self.request = request
        self.kind = kind
        self.degradation = degradation
        self.shadowed = shadowed
        self.enqueued_at = enqueued_at
        self.expires_at = expires_at
        self.expiry_reason = expiry_reason
        self.seq = seq
        self.flow = flow
        """``request.flow``, built once for the DELAY decision and reused at dispatch."""
        self.alive = alive
        self.gen = gen

    def __repr__(self) -> str:
        return (
            f"QueuedEntry({self.request.request_id!r}, seq={self.seq}, "
            f"alive={self.alive}, gen={self.gen})"
        )


Allow = Callable[[QueuedEntry], bool]


@quick_init
@dataclass(frozen=True, slots=True)
class Verdict:
    """A gate's "no": the reason and the exact seconds until it could say yes (or None)."""

    reason: Reason
    retry_after_s: float | None = None


class GateContext:
    """What a gate may read besides the request. Units: seconds, tokens, tokens/second;
    ``queued_tokens`` and ``drain_tokens_per_s`` count the tokens the engines compute (the
    uncached prompt and the output: ``WorkEstimate.computed_total``), so a gate compares
    a request's ``computed_total`` with them.

    Read-only, built once per request: a plain class that mypyc builds natively (see
    ``policies/native/read_only.py``). Equal only to itself."""

    __slots__ = (
        "appointment",
        "drain_tokens_per_s",
        "exec_p95_s",
        "now",
        "oldest_queued_s",
        "queued_tokens",
        "room_now",
    )

    def __init__(
        self,
        now: float,
        queued_tokens: int,
        drain_tokens_per_s: float | None,
        exec_p95_s: float | None,
        room_now: bool,
        oldest_queued_s: float | None = None,
        appointment: bool = False,
    ) -> None:
        self.now: Final = now
        self.queued_tokens: Final = queued_tokens
        self.drain_tokens_per_s: Final = drain_tokens_per_s
        self.exec_p95_s: Final = exec_p95_s
        self.room_now: Final = room_now
        self.oldest_queued_s: Final = oldest_queued_s
        """Seconds the oldest queued request has waited so far; None when nothing is queued."""
        self.appointment: Final = appointment
        """A retry back when a Retry-After of the gateway told its tenant to return: it keeps
        an appointment (``policies/engine/promise_book.py``) and is no retry storm."""

    def __repr__(self) -> str:
        names = (
            "now",
            "queued_tokens",
            "drain_tokens_per_s",
            "exec_p95_s",
            "room_now",
            "oldest_queued_s",
            "appointment",
        )
        return f"GateContext({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"


read_only(GateContext)


# Users' own policies subclass the contracts in Python, also when the core is compiled.
@mypyc_attr(allow_interpreted_subclasses=True)
class Plugin(ABC, Generic[S, P]):
    """A registered policy: ``type_name`` is its YAML name, ``params_model`` its schema
    (an instance of which is ``P``). Holds parameters only; state comes from ``new_state``."""

    type_name: ClassVar[str]
    params_model: ClassVar[type[Params]] = NoParams
    state_model: ClassVar[Callable[[], Any] | None] = None
    """The class of its state, built without arguments by ``new_state`` (None: a stateless
    policy, whose state is None). A policy whose state needs more overrides ``new_state``."""

    def __init__(self, params: P) -> None:
        self.params = params

    def new_state(self) -> S:
        """Fresh state for one scheduler, which owns it (a config swap keeps it)."""
        model = type(self).state_model
        return cast(S, None if model is None else model())

    def overrides(self, contract: type, hook: str) -> bool:
        """Whether this policy's class replaces ``contract``'s own ``hook`` (a no-op there),
        so callers may skip calling it altogether."""
        return getattr(type(self), hook) is not getattr(contract, hook)


@mypyc_attr(allow_interpreted_subclasses=True)
class Gate(Plugin[S, P]):
    """Admission gate. ``check`` has no side effects; ``commit`` records what its answer
    meant; ``on_accept``/``on_finish`` account."""

    @abstractmethod
    def check(self, state: S, req: RequestInfo, ctx: GateContext) -> Verdict | None: ...

    def reads_rates(self) -> bool:
        """Whether ``check`` or ``commit`` may read ``ctx.drain_tokens_per_s`` or
        ``ctx.exec_p95_s`` with these parameters. When no gate of a chain does, the
        scheduler leaves both None instead of computing them for each request."""
        return True

    def commit(
        self, state: S, req: RequestInfo, ctx: GateContext, verdict: Verdict | None, shadow: bool
    ) -> None:
        """Called once right after ``check`` with its answer (the chain stops at the first
        enforced refusal). ``shadow`` True: the answer was only logged, never given to the
        client, so nothing may be promised to it (e.g. no reservation)."""

    def promised(
        self, state: S, req: RequestInfo, now: float, after_s: float, lapse_at: float
    ) -> None:
        """This gate's enforced refusal of ``req`` was told Retry-After ``after_s`` (bounds
        and jitter applied): a gate that promises capacity books it here, held until
        ``lapse_at`` if the client does not return (``policies/engine/promise_book.py``)."""

    def on_accept(self, state: S, req: RequestInfo, now: float) -> None:
        """The request entered the system (queued or dispatched)."""

    def on_finish(
        self, state: S, req: RequestInfo, now: float, usage: Usage | None, served: bool
    ) -> None:
        """The request left the system; ``served`` is False if it never reached a backend."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Fairness(Plugin[S, P]):
    """Owns the queued entries; ``pop`` returns the next to dispatch, skipping dead ones."""

    @abstractmethod
    def push(self, state: S, entry: QueuedEntry, now: float) -> None: ...

    @abstractmethod
    def pop(self, state: S, now: float, allow: Allow | None = None) -> QueuedEntry | None:
        """The next entry to dispatch. ``allow`` (tenant-level headroom) may be honoured to
        skip entries it refuses, leaving them in place; the scheduler re-checks it."""

    @abstractmethod
    def push_back(self, state: S, entry: QueuedEntry) -> None:
        """Return a popped entry that could not dispatch, keeping its place."""

    def discard(self, state: S, entry: QueuedEntry) -> None:
        """``entry`` left the queue without being popped (expired, cancelled)."""

    def charge(self, state: S, req: RequestInfo, tokens: float) -> None:
        """Account ``tokens`` of service to ``req``'s tenant (negative corrects)."""

    def deficits(self, state: S) -> Mapping[str, float]:
        return {}

    def share_report(self, state: S) -> ShareReport | None:
        """Fleet mode: the service since the last report and the tenants queued here (None:
        this type keeps no state to share across replicas)."""
        return None

    def share_merge(
        self, state: S, share: FleetShare | None, failed: ShareReport | None = None
    ) -> None:
        """Fleet mode: the fleet's view after a sync (None: fairness within this replica
        only); ``failed``: a report the fleet may not have counted, to send again."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Discipline(Plugin[S, P]):
    """Queue discipline at dequeue: True means drop this entry (REJECT OVERLOADED)."""

    @abstractmethod
    def should_drop(self, state: S, sojourn_s: float, now: float, backlog: int) -> bool:
        """Called once per request leaving the queue, in order; ``sojourn_s`` is its time
        queued and ``backlog`` how many stay queued behind it."""

    def on_empty(self, state: S) -> None:
        """Capacity was free and nothing was queued."""


@dataclass(slots=True)
class BackendLoad:
    """The gateway's own accounting for one backend."""

    in_flight: int = 0
    in_flight_tokens: int = 0


@mypyc_attr(allow_interpreted_subclasses=True)
class Limit(Plugin[S, P]):
    """Concurrency limit per backend: may it take one more request now?"""

    @abstractmethod
    def has_room(self, state: S, backend: BackendView, load: BackendLoad) -> bool: ...

    def on_sample(
        self, state: S, backend: BackendView | None, load: BackendLoad, end: Ending
    ) -> None:
        """A request on ``backend`` ended as ``end`` says (a FAILED one was dropped);
        adaptive limits learn here."""

    def current(self, state: S, backend: BackendView, load: BackendLoad) -> float | None:
        """The limit now, for stats; None when the backend's signals alone decide."""
        return None

    def room_bound(self, backend: BackendView) -> float:
        """Optional. A limit whose room depends on the backend's signals alone (not on its
        state) may state it as a number, read once per snapshot: ``has_room`` must then be
        ``load.in_flight == 0 or load.in_flight < room_bound(backend)``. Placement uses it
        only where a limit overrides it (``overrides(Limit, "room_bound")``)."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class NamedGate:
    name: str
    gate: Gate[Any, Any]
    shadow: bool = False
