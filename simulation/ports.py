"""The two seams the simulator drives: an engine and an admission policy.

Production code sits behind both: ``engine_adapter`` wraps the emulator's engine model and
``admission_adapter`` wraps ``policies.engine.scheduler.Scheduler``. The seams exist so the
event loop reads as the protocol it is, not as one library's spelling of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from policies.backends import BackendsSnapshot, BackendView


class VirtualClock:
    """Seconds on the simulation's clock; callable, so it is a ``policies.types.Clock``."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True, slots=True)
class EngineStep:
    """One engine step that starts at ``now`` and ends at ``ends_at`` (it may hold a run of
    plain decode steps, ``EmulatedBackend.step``).

    ``first_token``: requests whose first output token comes out of this step (decoding
    starts); ``finished``: requests that complete in it. Both take effect at the step's end.
    """

    ends_at: float
    first_token: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    changed: bool = True
    """False for a step that only advanced decoding: nothing the policy can see changed."""


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """A request handed to the engine: its prompt and the output tokens it is to generate.
    ``block_hashes``: the prompt's chained block hashes, for the prefix cache."""

    request_id: str
    prompt_tokens: int
    output_tokens: int
    block_hashes: tuple[bytes, ...] = ()


class EnginePort(Protocol):
    def add(self, request: EngineRequest, now: float) -> None: ...

    def abort(self, request_id: str) -> None: ...
    def decode_reach(self, now: float) -> float:
        """Where plain decode steps from ``now`` would take the engine (``Engine.decode_reach``)."""
        ...

    def step(self, now: float, until: float | None = None) -> EngineStep | None:
        """Run one step from ``now``; None when there is nothing to run. ``until``: the
        caller handles no event before it, so plain decode steps up to then may run as one."""
        ...

    def view(self, now: float) -> BackendView: ...


@dataclass(frozen=True, slots=True)
class Dispatched:
    """Sent to the engine; ``max_tokens`` is a degrade decision's output cap (the ladder)."""

    request_id: str
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Queued:
    request_id: str


@dataclass(frozen=True, slots=True)
class Deferred:
    """Rejected (at once or out of the queue); the agent should retry after ``retry_after_s``."""

    request_id: str
    retry_after_s: float | None


AdmissionAnswer = Dispatched | Queued | Deferred


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt at an agent's turn, as admission is asked for it. ``session``: the agent's
    stable id (the gateway's ``X-Session-Id``); ``is_retry``: an earlier attempt was deferred."""

    request_id: str
    session: str
    prompt_tokens: int
    output_tokens: int
    is_retry: bool


class AdmissionPort(Protocol):
    def submit(self, attempt: Attempt, fleet: BackendsSnapshot) -> AdmissionAnswer: ...

    def poll(self, fleet: BackendsSnapshot) -> list[AdmissionAnswer]: ...
    def first_token(self, request_id: str) -> None:
        """The turn's first token came back (every simulated turn streams)."""
        ...

    def release(
        self, request_id: str, usage: tuple[int, int], decode_start: float, finished: float
    ) -> None:
        """The turn completed; ``usage`` is (prompt, completion) tokens; times in seconds."""
        ...

    def next_wakeup(self) -> float | None: ...
