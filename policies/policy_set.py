"""``PolicySet``: one built, validated ``policy:`` section, parameters only.

The scheduler owns every piece of mutable state; a ``PolicySet`` only says which plugins run
and with which parameters, so a hot reload swaps it without losing queues or tickets.
``policies.registry.build_policy`` builds one from YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar, cast

from policies.contracts import Discipline, Fairness, Limit, NamedGate
from policies.engine.cache_params import CacheEstimate, CacheParams
from policies.engine.headroom_params import HeadroomParams
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.queue_params import QueueParams
from policies.engine.retry_after_params import RetryAfterParams
from policies.gates.quota_params import QuotaCounts
from policies.ladder.ladder_params import LadderParams
from policies.runs.runs_params import RunsParams

G = TypeVar("G")


def is_enforcing(named: NamedGate, kind: type) -> bool:
    """``named`` is an enforcing (not shadow) gate of plugin class ``kind`` or a subclass.

    Read from the class's MRO: with the compiled core (mypyc), ``isinstance(gate, kind)``
    asked from interpreted code answers True for an instance of any compiled ``Gate``
    subclass (the ABC's instance check misreads native instances, and caches the wrong
    answer), while the MRO answers alike from compiled and interpreted code."""
    return kind in type(named.gate).__mro__ and not named.shadow


@dataclass(frozen=True)
class PolicySet:
    """A built, validated policy: parameters only, no state."""

    name: str
    version: str
    limit: Limit[Any, Any]
    fairness: Fairness[Any, Any]
    discipline: Discipline[Any, Any]
    gates: tuple[NamedGate, ...] = ()
    queue: QueueParams = field(default_factory=QueueParams)
    ladder: LadderParams = field(default_factory=LadderParams)
    retry_after: RetryAfterParams = field(default_factory=RetryAfterParams)
    headroom: HeadroomParams = field(default_factory=HeadroomParams)
    prefill_backlog: PrefillBacklogParams = field(default_factory=PrefillBacklogParams)
    runs: RunsParams = field(default_factory=RunsParams)
    cache: CacheParams = field(default_factory=CacheParams)

    @cached_property
    def models_prefixes(self) -> bool:
        """Whether the scheduler keeps its model of each backend's prefix cache (and so the
        gateway hashes prompts for it): where locality routing, or a cached-token estimate
        that something reads (the fair share's or a quota's computed tokens), needs it.
        Read for every request, so worked out once per policy (the set is frozen)."""
        cache = self.cache
        if cache.locality_weight > 0:
            return True
        if cache.estimate is not CacheEstimate.PREFIX_MODEL:
            return False
        computed = QuotaCounts.COMPUTED_TOKENS
        if cache.fairness_counts is computed:
            return True
        return any(getattr(g.gate.params, "counts", None) is computed for g in self.gates)

    def first_enforcing(self, kind: type[G]) -> G | None:
        """The first enforcing gate of plugin class ``kind`` (None: none)."""
        for named in self.gates:
            if is_enforcing(named, kind):
                return cast(G, named.gate)
        return None
