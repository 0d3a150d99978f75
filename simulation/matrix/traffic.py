"""What the tenants of a matrix cell send: request shapes and how their clients arrive.

A tenant is a population of clients. Closed-loop clients (``clients`` > 0) send one
request, wait for it, think, and send the next; a multi-turn client's prompt grows by each
turn's question and answer until its conversation ends. Open-loop tenants (``rate_per_s``)
send Poisson arrivals, optionally in bursts (``burst``: on and off spans). Every client
comes back exactly when a refusal's Retry-After says (its own backoff when none is given).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from emulator.profile import LengthComponent, LengthMixture


def fixed_length(tokens: int) -> LengthMixture:
    """Every request generates exactly ``tokens`` tokens."""
    return LengthMixture(
        components=(LengthComponent(weight=1.0, min_tokens=tokens, max_tokens=tokens),)
    )


def draw_length(lengths: LengthMixture, rng: random.Random) -> int:
    comps = lengths.components
    pick = rng.choices(comps, weights=[c.weight for c in comps])[0]
    return rng.randint(pick.min_tokens, pick.max_tokens)


@dataclass(frozen=True, slots=True)
class Shape:
    """One request: its prompt, its output lengths, and whether the client streams."""

    prompt_tokens: int
    lengths: LengthMixture
    stream: bool = True
    turns: int = 1
    """Turns per conversation; each turn's prompt holds the previous turns' prompt and
    answer plus ``question_tokens`` more."""
    question_tokens: int = 0
    hashed: bool = False
    """Its closed-loop clients send chat messages (``chat_clients.py``) whose prompts
    carry their hashes: the engine's prefix cache serves what they resend, and the
    gateway hashes them for its prefix model where the policy keeps one."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """One tenant of a cell. Exactly one of ``clients`` (closed loop) and ``rate_per_s``
    (open loop) is set."""

    name: str
    shape: Shape
    clients: int = 0
    think_mean_s: float = 0.0
    rate_per_s: float = 0.0
    burst: tuple[float, float] | None = None
    """(on, off) seconds: an open-loop tenant sends only while on, at a rate that keeps
    its mean at ``rate_per_s``."""
    weight: float = 1.0

    def __post_init__(self) -> None:
        if (self.clients > 0) == (self.rate_per_s > 0.0):
            raise ValueError(f"tenant {self.name}: set clients or rate_per_s, not both")

    def think_s(self, rng: random.Random) -> float:
        return rng.expovariate(1.0 / self.think_mean_s) if self.think_mean_s > 0 else 0.0

    def arrivals(self, duration_s: float, rng: random.Random) -> list[float]:
        """Open-loop arrival times in ``[0, duration_s)``."""
        if self.burst is None:
            on, off = duration_s, 0.0
        else:
            on, off = self.burst
        rate = self.rate_per_s * (on + off) / on
        times, now = [], rng.expovariate(rate)
        while now < duration_s:
            cycle = now % (on + off)
            if cycle < on:
                times.append(now)
                now += rng.expovariate(rate)
            else:  # memoryless: the next arrival counts from the next on span's start
                now += on + off - cycle + rng.expovariate(rate)
        return times
