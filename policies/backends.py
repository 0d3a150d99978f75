"""A read-only view of the backends, as the decision core sees it.

The gateway's scraper builds a new ``BackendsSnapshot`` after each scrape; decisions read
one snapshot and never do I/O. Every signal is optional: a backend that exports no such
family, or was never scraped, has None there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from policies.native.quick_init import quick_init


class Health(str, enum.Enum):  # noqa: UP042
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


@quick_init
@dataclass(frozen=True, slots=True)
class BackendView:
    """Live signals of one backend, derived from its own /metrics over a sliding window.

    Units: seconds, tokens, fractions in [0, 1]. ``signal_age_s`` is the age of the newest
    successful scrape; ``stale`` signals count as saturated (documented in the README).
    """

    name: str
    models: frozenset[str]
    health: Health = Health.HEALTHY
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    preemptions_per_s: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    queue_time_p50_s: float | None = None
    queue_time_p90_s: float | None = None
    ttft_p90_s: float | None = None
    e2e_p90_s: float | None = None
    engine_rejections_per_s: float | None = None
    capacity_estimate: float | None = None
    prefill_tokens_per_s: float | None = None
    """The engine's prompt tokens per second of prefill time (its own histograms)."""
    running_peak: float | None = None
    """The most requests the engine was seen running at once (since the gateway started)."""
    itl_s: float | None = None
    """The engine's mean inter-token latency over the last few seconds: its step time now."""
    itl_floor_s: float | None = None
    """The lowest recent such mean: its step time with the lightest batch seen lately."""
    prefix_cache_hit_rate: float | None = None
    """Fraction of looked-up prompt tokens the engine's prefix cache served, over the signal
    window (``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``), 0..1."""
    kv_cache_tokens: float | None = None
    """The KV cache's capacity in tokens (``vllm:cache_config_info``: ``num_gpu_blocks`` times
    ``block_size``): what bounds the scheduler's model of the backend's prefix cache."""
    kv_block_size: int | None = None
    """Tokens per KV block (``block_size``): the prefix cache serves whole blocks only."""
    signal_age_s: float | None = None
    stale: bool = False
    peer_in_flight: int = 0
    """Requests other gateway replicas have in flight on this backend, as last shared
    (fleet mode, ``state: redis``); 0 for a single gateway. Limits count it with their own."""

    @property
    def available(self) -> bool:
        return self.health is not Health.DOWN

    def serves(self, model: str) -> bool:
        return model in self.models


@quick_init
@dataclass(frozen=True, slots=True)
class BackendsSnapshot:
    """All backends at one instant ``at`` (clock seconds)."""

    at: float
    backends: tuple[BackendView, ...] = ()

    def get(self, name: str) -> BackendView | None:
        for b in self.backends:
            if b.name == name:
                return b
        return None

    def serving(self, model: str) -> tuple[BackendView, ...]:
        """Backends that are not down and serve ``model``."""
        down = Health.DOWN  # (``available`` and ``serves``, inlined: read per decision)
        return tuple([b for b in self.backends if b.health is not down and model in b.models])

    @property
    def any_available(self) -> bool:
        return any(b.available for b in self.backends)
