"""``PolicySet``: one built, validated ``policy:`` section, parameters only.

The scheduler owns every piece of mutable state; a ``PolicySet`` only says which plugins run
and with which parameters, so a hot reload swaps it without losing queues or tickets.
``policies.registry.build_policy`` builds one from YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies.contracts import Discipline, Fairness, Limit, NamedGate
from policies.engine.headroom_params import HeadroomParams
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.queue_params import QueueParams
from policies.engine.retry_after_params import RetryAfterParams
from policies.ladder.ladder_params import LadderParams
from policies.runs.runs_params import RunsParams


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
