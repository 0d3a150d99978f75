"""What a swap keeps: each component's state object when its type is unchanged (gates by name
and type), a fresh one otherwise; a new fairness type refilled with the live queue; the ladder
steps that are still there."""

from __future__ import annotations

from typing import Any

from policies.engine.swap import PolicyStates
from policies.policy_set import PolicySet
from policies.registry import build_policy
from tests.unit.policies.helpers import queued_entry

STATEFUL: dict[str, Any] = {
    "limit": {"type": "adaptive"},
    "queue": {"discipline": {"type": "codel"}},
    "fairness": {"type": "vtc"},
    "gates": [
        {"type": "tenant_quota", "name": "quota", "parameters": {"default": {"max_concurrent": 9}}},
        {"type": "retry_budget", "name": "retries"},
    ],
    "ladder": {
        "steps": [
            {"name": "s1", "at": 0.5, "action": "reject"},
            {"name": "s2", "at": 0.6, "action": "reject"},
        ]
    },
}


def states(policy: PolicySet) -> PolicyStates:
    s = PolicyStates.fresh(policy)
    s.ladder = {"s1", "s2"}
    return s


def test_unchanged_types_keep_every_state_object() -> None:
    old = build_policy(STATEFUL)
    new = build_policy({**STATEFUL, "name": "renamed"})
    before = states(old)
    after = before.carry_over(old, new, [])
    assert after.limit is before.limit and after.discipline is before.discipline
    assert after.fairness is before.fairness
    assert after.gates["quota"] is before.gates["quota"]
    assert after.gates["retries"] is before.gates["retries"]
    assert after.ladder == {"s1", "s2"}


def test_changed_types_get_fresh_states_and_the_queue_is_refilled_in_order() -> None:
    old = build_policy(STATEFUL)
    gates = [{"type": "retry_budget", "name": "quota"}, {"type": "tenant_quota", "name": "new"}]
    new = build_policy(
        {
            "limit": {"type": "fixed", "parameters": {"max_in_flight": 4}},
            "queue": {"discipline": {"type": "deadline"}},
            "fairness": {"type": "fifo"},
            "gates": gates,
            "ladder": {"steps": [{"name": "s2", "at": 0.6, "action": "reject"}]},
        }
    )
    before = states(old)
    live = [queued_entry(i, 1000.0 + i, 30.0, tenant=f"t{i % 2}") for i in range(3)]
    for e in live:
        old.fairness.push(before.fairness, e, e.enqueued_at)
    after = before.carry_over(old, new, live)
    assert after.limit is not before.limit and after.fairness is not before.fairness
    assert after.discipline is not before.discipline
    assert after.gates["quota"] is not before.gates["quota"]  # same name, other type
    assert set(after.gates) == {"quota", "new"}
    assert after.ladder == {"s2"}
    assert [e.gen for e in live] == [1, 1, 1]  # copies in the old structure go stale
    popped = [new.fairness.pop(after.fairness, 2000.0) for _ in range(3)]
    assert popped == live
