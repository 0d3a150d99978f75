"""``sluicegate_shared_state_mode``: one sample per mode, 1 for the current one (the labels
dashboards and alerts select on)."""

from __future__ import annotations

from gateway.replicas.exposition import SharedStateCollector
from gateway.replicas.local import LocalState
from policies.shared_mode import SharedMode


class Failing(LocalState):
    mode = SharedMode.FALLBACK
    replicas = 3
    failures = 2


def mode_samples(state: LocalState) -> dict[str, float]:
    family = next(iter(SharedStateCollector(lambda: state).collect()))
    return {s.labels["mode"]: s.value for s in family.samples}


def test_one_replica_reports_local() -> None:
    assert mode_samples(LocalState()) == {
        "local": 1.0,
        "shared": 0.0,
        "rejoining": 0.0,
        "fallback": 0.0,
        "closed": 0.0,
    }


def test_a_replica_in_fallback_reports_it_with_its_count_and_failures() -> None:
    state = Failing()
    assert mode_samples(state) == {
        "local": 0.0,
        "shared": 0.0,
        "rejoining": 0.0,
        "fallback": 1.0,
        "closed": 0.0,
    }
    values = {f.name: f.samples[0].value for f in SharedStateCollector(lambda: state).collect()}
    assert values["sluicegate_fleet_replicas"] == 3
    assert values["sluicegate_shared_state_failures"] == 2
