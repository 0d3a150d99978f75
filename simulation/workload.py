"""The closed-loop agent workload of the reference table (docs/seed-table.md), as parameters
plus seeded draws.

An agent thinks (exponential, mean ``think_mean_s``), submits one turn, waits for it to
finish, and thinks again. A deferred turn backs off and is resubmitted unchanged: its
output length is drawn once per turn, not per attempt. Output lengths come from the
emulator profile's mixture (mean 354 tokens), so the simulator and the emulator
serve the very same turns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from emulator.profile import LengthMixture


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """How an agent waits after a deferral, in seconds.

    The ``k``-th consecutive deferral of one turn (k = 0, 1, ...) waits
    ``max(retry_after_s, min(cap_s, base_s * growth**k))``, scaled by a uniform jitter in
    ``[1 - jitter, 1]``. ``growth = 1`` and ``base_s = 0`` means "exactly what Retry-After
    says", which is what an agent that trusts the server does.
    """

    base_s: float = 6.0
    growth: float = 2.0
    cap_s: float = 120.0
    jitter: float = 0.0
    honour_retry_after: bool = True

    def delay(self, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
        exponential = min(self.cap_s, self.base_s * self.growth**attempt)
        server = retry_after_s if (self.honour_retry_after and retry_after_s) else 0.0
        wait = max(server, exponential)
        if self.jitter > 0.0:
            wait *= 1.0 - self.jitter * rng.random()
        return wait


@dataclass(frozen=True, slots=True)
class AgentWorkload:
    """What every agent does. ``prompt_tokens`` is the prefill each turn carries."""

    lengths: LengthMixture
    think_mean_s: float = 4.5
    prompt_tokens: int = 64
    backoff: BackoffPolicy = BackoffPolicy()

    def think_s(self, rng: random.Random) -> float:
        return rng.expovariate(1.0 / self.think_mean_s)

    def output_tokens(self, rng: random.Random) -> int:
        """One draw from the profile's mixture: pick a component by weight, then uniform."""
        comps = self.lengths.components
        pick = rng.choices(comps, weights=[c.weight for c in comps])[0]
        return rng.randint(pick.min_tokens, pick.max_tokens)
