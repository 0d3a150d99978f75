"""Prefill backlog: keep each backend's un-prefilled prompt tokens short, so a request
dispatched now gets its first token within a target, whatever another tenant sent before.

An engine runs prefill first come, first served (chunked, in admission order): a request
dispatched behind 24,000 prompt tokens waits for all of them, however fair the gateway's
order was. So the gateway lets a backend take a request only while the prompt tokens it
has dispatched there without a first token back (``pending``), plus the request's own,
stay within ``rate x ttft_target_s``; the rest waits in the gateway queue, where fairness
orders it. A backend with nothing pending always takes one (a prompt larger than the bound
still goes, alone). Such an oversized prompt at the head of a backend's backlog delays
whatever is dispatched after it by its whole prefill, whether that waits here or in the
engine; holding short prompts here meanwhile only adds the gateway's wait and its estimate's
lag to theirs. So the bound counts the backlog behind an oversized head: short prompts line
up in the engine right behind it, up to the bound, while another oversized one waits.
With ``between_tenants`` the bound holds a request only while another tenant is active
(``Placement.prefill_binds``): a tenant alone waits behind its own prompts either way.

What is measured, never typed in:

- **first tokens.** The shell reports each streamed request's first token
  (``first_token``). Prefill being first come, first served, it also ends the prefill of
  everything dispatched to that backend before it.
- **the prefill rate** of each backend: the engine's own, prompt tokens per second of
  prefill time from its histograms (``BackendView.prefill_tokens_per_s``; it includes the
  decode steps interleaved with prefill, the rate a new request actually sees), times the
  share its prefix cache did not serve (``prefix_cache_hit_rate``): prompts are counted in
  the tokens the engine computes (the placement's estimate of each one's uncached part). Without
  it, the gateway's: prompt tokens whose first token came back over the busy time it took
  (from the later of the previous first token and their dispatch), decayed with
  ``half_life_s``; it also holds the HTTP and tokenizing time of each request, so it is
  low (a tighter bound) for short prompts.
- **requests without a visible first token** (non-streamed): their prefill is taken to end
  when the measured rate says the tokens ahead of them and theirs are done; a later first
  token or their end corrects it. Until a rate is measured nothing is estimated and no bound
  applies (the backend's other limits still do).

Pure: every method takes the clock reading.
"""

from __future__ import annotations

import math

from policies.backends import BackendView
from policies.engine.prefill_backlog_params import PrefillBacklogParams


class PrefillRate:
    """Prompt tokens per second of prefill, from (tokens, busy seconds) samples, decayed."""

    __slots__ = ("_at", "_half_life_s", "_seconds", "_tokens")

    def __init__(self, half_life_s: float) -> None:
        self._half_life_s = half_life_s
        self._tokens = 0.0
        self._seconds = 0.0
        self._at: float | None = None

    def add(self, tokens: int, seconds: float, now: float) -> None:
        if tokens <= 0 or seconds <= 0:
            return
        self._decay(now)
        self._tokens += tokens
        self._seconds += seconds

    def _decay(self, now: float) -> None:
        if self._at is not None and now > self._at:
            keep = math.exp2(-(now - self._at) / self._half_life_s)
            self._tokens *= keep
            self._seconds *= keep
        self._at = now if self._at is None or now > self._at else self._at

    def tokens_per_s(self) -> float | None:
        return self._tokens / self._seconds if self._seconds > 0 else None


class BackendPrefill:
    """One backend's dispatched requests without a first token, in dispatch order."""

    __slots__ = (
        "_credited_at",
        "_pending",
        "_streamed",
        "engine_rate",
        "pending_tokens",
        "rate",
    )

    def __init__(self, half_life_s: float) -> None:
        self._pending: dict[str, tuple[int, float]] = {}  # id -> (tokens, dispatched_at)
        self._streamed: set[str] = set()
        self._credited_at = -math.inf
        self.pending_tokens = 0
        self.rate = PrefillRate(half_life_s)
        """The gateway's own measurement, from first tokens."""
        self.engine_rate: float | None = None
        """The engine's, from its histograms (None: it exports none)."""

    def tokens_per_s(self) -> float | None:
        """The prefill rate: the engine's when it states one, else the gateway's."""
        engine = self.engine_rate
        if engine is not None and engine > 0:
            return engine
        return self.rate.tokens_per_s()

    def dispatched(self, request_id: str, tokens: int, now: float, streamed: bool) -> None:
        self._pending[request_id] = (tokens, now)
        self.pending_tokens += tokens
        if streamed:
            self._streamed.add(request_id)

    def first_token(self, request_id: str, now: float) -> None:
        """``request_id``'s first token came back: its prefill and all before it ended."""
        if request_id not in self._pending:
            return
        tokens, start = self._credit_through(request_id)
        self.rate.add(tokens, now - max(start, self._credited_at), now)
        self._credited_at = now

    def ended(self, request_id: str, completed: bool = False) -> None:
        """The request left the backend (finished, failed, cancelled). ``completed``: it
        finished, so its prefill and all before it ended, at some unknown time (no rate
        sample); otherwise only its own prompt leaves the backlog."""
        if request_id not in self._pending:
            return
        if completed:
            self._credit_through(request_id)
            return
        tokens, _ = self._pending.pop(request_id)
        self._streamed.discard(request_id)
        self.pending_tokens -= tokens

    def _credit_through(self, request_id: str) -> tuple[int, float]:
        """Drop ``request_id`` and every entry before it; their tokens and first dispatch."""
        tokens, start = 0, math.inf
        for rid in list(self._pending):
            n, at = self._pending.pop(rid)
            self._streamed.discard(rid)
            tokens += n
            start = min(start, at)
            if rid == request_id:
                break
        self.pending_tokens -= tokens
        return tokens, start

    def head_tokens(self) -> int:
        """Prompt tokens of the oldest request still pending (the one prefilling now)."""
        for tokens, _ in self._pending.values():
            return tokens
        return 0

    def clears_at(self, rate: float) -> float:
        """When the prompts pending here are done prefilling at ``rate`` tokens/s, each
        starting no earlier than its dispatch (-inf: nothing pending)."""
        done_at = -math.inf if not self._pending else self._credited_at
        for tokens, at in self._pending.values():
            done_at = max(done_at, at) + tokens / rate
        return done_at

    def estimate(self, now: float) -> float | None:
        """Drop the unstreamed entries at the head whose prefill the measured rate says has
        ended by ``now``; returns when the next one will (None: nothing to estimate)."""
        rate = self.tokens_per_s()
        if rate is None:
            return None
        done_at = self._credited_at
        for rid, (tokens, at) in list(self._pending.items()):
            done_at = max(done_at, at) + tokens / rate
            if rid in self._streamed:
                return None  # its own first token will tell
            if done_at > now:
                return done_at
            self._pending.pop(rid)
            self.pending_tokens -= tokens
            self._credited_at = done_at
        return None


class PrefillBacklog:
    """Every backend's ``BackendPrefill``; the room rule and the next estimated change."""

    __slots__ = ("_backends", "params")

    def __init__(self, params: PrefillBacklogParams) -> None:
        self.params = params
        self._backends: dict[str, BackendPrefill] = {}

    def backend(self, name: str) -> BackendPrefill:
        found = self._backends.get(name)
        if found is None:
            found = self._backends[name] = BackendPrefill(self.params.half_life_s)
        return found

    def bound(self, name: str) -> float | None:
        """Prompt tokens ``name`` may hold un-prefilled; None: no rate measured yet."""
        rate = self.backend(name).tokens_per_s()
        return None if rate is None else rate * self.params.ttft_target_s

    def admits(self, name: str, tokens: int) -> bool:
        """Whether ``name`` may take a request of ``tokens`` prompt tokens now."""
        b = self._backends.get(name)
        if b is None or b.pending_tokens <= 0:
            return True
        bound = self.bound(name)
        if bound is None or b.pending_tokens + tokens <= bound:
            return True
        head = b.head_tokens()  # an oversized head delays everything behind it anyway
        return head > bound and b.pending_tokens - head + tokens <= bound

    def advance(self, now: float) -> float | None:
        """Apply the rate estimates up to ``now``; the earliest next estimated change."""
        wake: float | None = None
        for b in self._backends.values():
            at = b.estimate(now) if b.pending_tokens > 0 else None
            if at is not None and (wake is None or at < wake):
                wake = at
        return wake

    def observe(self, backends: tuple[BackendView, ...]) -> None:
        """A new snapshot: each backend's engine-stated prefill rate, in the tokens it
        computes (its histograms count every prompt token over the time it took to prefill
        those its prefix cache did not serve, so its rate is that share of theirs)."""
        for view in backends:
            rate, hit = view.prefill_tokens_per_s, view.prefix_cache_hit_rate
            if rate is not None and hit is not None:
                rate *= 1.0 - min(1.0, max(0.0, hit))
            self.backend(view.name).engine_rate = rate

    def fastest_rate(self, names: list[str]) -> float | None:
        """The highest prefill rate measured among ``names`` (None: none measured)."""
        best: float | None = None
        for name in names:
            rate = self.backend(name).tokens_per_s()
            if rate is not None and rate > 0 and (best is None or rate > best):
                best = rate
        return best

    def pending_tokens(self) -> dict[str, int]:
        return {n: b.pending_tokens for n, b in self._backends.items()}
