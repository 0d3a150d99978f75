"""The fairness sync against a real redis-server: Redis's script keeps the same ledger as
``policies/fairness/fleet_ledger.py`` (sums, lifts, who is queued elsewhere), and a failed
sync hands fairness back to the replica with its report kept."""

from __future__ import annotations

import pytest

from gateway.replicas.redis_store import FairShareHooks, RedisState
from policies.fairness.fleet_ledger import FleetLedger
from policies.fairness.fleet_share import FleetShare, ShareReport
from tests.redis_server import RedisServer
from tests.unit.replicas.conftest import MakeReplica
from tests.unit.replicas.test_redis_store import config


class Replica:
    """What the scheduler would report and what it is handed back."""

    def __init__(self) -> None:
        self.next: ShareReport | None = None
        self.merged: list[tuple[FleetShare | None, ShareReport | None]] = []

    def hooks(self) -> FairShareHooks:
        return FairShareHooks(lambda: self.next, lambda s, f: self.merged.append((s, f)))


@pytest.fixture
def fleet(redis_server: RedisServer, replica: MakeReplica) -> dict[str, tuple[RedisState, Replica]]:
    cfg = config(redis_server, fair_share_interval_ms=1000, fair_share_allowance_tokens=25.0)
    out = {}
    for name in ("A", "B", "C"):
        scheduler = Replica()
        out[name] = (replica(cfg, name, fair=scheduler.hooks()), scheduler)
    return out


STEPS = [
    ("A", ShareReport({"x": 100.0}, frozenset({"x"}))),
    ("B", ShareReport({"y": 30.0, "x": 20.0}, frozenset({"y"}))),
    ("C", ShareReport({"y": 0.1}, frozenset({"y"}))),
    ("A", ShareReport({"x": -7.25, "w": 1.0 / 3.0}, frozenset({"x", "w"}))),
    ("B", ShareReport({}, frozenset())),
    ("C", ShareReport({"y": 1e-6}, frozenset({"y", "z"}))),
]


async def test_redis_keeps_the_same_ledger_as_the_model(
    fleet: dict[str, tuple[RedisState, Replica]],
) -> None:
    model = FleetLedger(ttl_s=3600.0)
    for step, (name, report) in enumerate(STEPS):
        state, replica = fleet[name]
        replica.next = report
        await state.sync_fair_share()
        share, failed = replica.merged[-1]
        expected = model.exchange(name, report, now=float(step))
        assert failed is None and share is not None
        assert dict(share.counters) == expected.counters, step
        assert dict(share.elsewhere) == expected.elsewhere, step
        assert share.allowance == 25.0
    # w starts at the last served counter (y: 120), above the floor (x: 112.75)
    assert expected.elsewhere == {"x": 112.75, "w": 120.0 + 1.0 / 3.0}
    view = (await fleet["A"][0].fleet())["fair_share"]
    assert view["counters"] == model.counters
    assert {t: sorted(r) for t, r in view["queued_on"].items()} == {
        "x": ["A"],
        "w": ["A"],
        "y": ["C"],
        "z": ["C"],
    }


async def test_a_failed_sync_gives_fairness_back_to_the_replica_with_its_report(
    fleet: dict[str, tuple[RedisState, Replica]], redis_server: RedisServer
) -> None:
    """Only fairness degrades: the limits stay shared until a call of theirs fails."""
    state, replica = fleet["A"]
    replica.next = ShareReport({"x": 5.0}, frozenset({"x"}))
    redis_server.stop()
    await state.sync_fair_share()
    assert replica.merged == [(None, replica.next)]  # per replica; the 5 sent next time
    assert (state.mode, state.failures) == ("shared", 1)
    await state.beat()  # the heartbeat fails: the limits fall back, fairness stays local
    assert state.mode == "fallback"
    assert replica.merged[-1] == (None, None)
