"""The mutable state behind a ``PolicySet``, and how it survives a swap.

A component whose type is unchanged keeps its state (parameters may change). A new
fairness type gets a fresh state refilled with the live queue in arrival order, so no
queued request is lost; gates keep state by name and type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.contracts import QueuedEntry
from policies.policy_set import PolicySet


@dataclass
class PolicyStates:
    limit: Any
    fairness: Any
    discipline: Any
    gates: dict[str, Any]
    ladder: set[str] = field(default_factory=set)

    @classmethod
    def fresh(cls, policy: PolicySet) -> PolicyStates:
        return cls(
            limit=policy.limit.new_state(),
            fairness=policy.fairness.new_state(),
            discipline=policy.discipline.new_state(),
            gates={g.name: g.gate.new_state() for g in policy.gates},
        )

    def carry_over(
        self, old: PolicySet, new: PolicySet, live: Sequence[QueuedEntry]
    ) -> PolicyStates:
        fresh = PolicyStates.fresh(new)
        if type(old.limit) is type(new.limit):
            fresh.limit = self.limit
        if type(old.discipline) is type(new.discipline):
            fresh.discipline = self.discipline
        if type(old.fairness) is type(new.fairness):
            fresh.fairness = self.fairness
        else:
            for entry in live:
                entry.gen += 1
                new.fairness.push(fresh.fairness, entry, entry.enqueued_at)
        old_types = {g.name: type(g.gate) for g in old.gates}
        for g in new.gates:
            if old_types.get(g.name) is type(g.gate):
                fresh.gates[g.name] = self.gates[g.name]
        step_names = {s.name for s in new.ladder.steps}
        fresh.ladder = {n for n in self.ladder if n in step_names}
        return fresh
