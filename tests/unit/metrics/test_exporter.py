"""Every series of a label value known in advance is exported at 0 from the start: each
configured tenant's (with the classes it may use) for every decision and reason, outcome,
queue wait, shed and retry; each deadline result and status refused before scheduling;
each backend's upstream error kinds. A reload that stops naming a tenant removes its
series; ``other`` stays."""

from __future__ import annotations

from gateway.metrics.exporter import GatewayMetrics
from gateway.metrics.known_labels import (
    DECISION_REASONS,
    OTHER,
    OUTCOMES,
    REFUSED_STATUSES,
    UPSTREAM_ERROR_KINDS,
    TenantLabels,
)
from policies.types import Outcome
from tests.unit.gateway.conftest import Series, series

ACME = TenantLabels(frozenset({"acme", "beta"}), (("acme", "chat"), ("beta", "chat")))


def _labels(found: Series, name: str, *keys: str) -> set[tuple[str, ...]]:
    return {tuple(dict(labels)[k] for k in keys) for labels in found[name]}


def test_a_fresh_gateway_exports_every_known_series_at_zero() -> None:
    found = series(GatewayMetrics(ACME))
    pairs = set(ACME.pairs)
    decisions = _labels(
        found, "sluicegate_decisions_total", "decision", "reason", "tenant", "class"
    )
    assert decisions == {(*dr, *p) for dr in DECISION_REASONS for p in pairs}
    outcomes = _labels(found, "sluicegate_outcomes_total", "outcome", "tenant", "class")
    assert outcomes == {(o, *p) for o in OUTCOMES for p in pairs}
    for name in (
        "sluicegate_queue_wait_seconds_count",
        "sluicegate_shed_total",
        "sluicegate_retries_total",
    ):
        assert _labels(found, name, "tenant", "class") == pairs, name
    assert _labels(found, "sluicegate_deadlines_total", "result") == {("met",), ("missed",)}
    assert _labels(found, "sluicegate_invalid_requests_total", "status") == {
        (s,) for s in REFUSED_STATUSES
    }
    counted = [
        v for name, by in found.items() if not name.endswith("_created") for v in by.values()
    ]
    assert set(counted) == {0.0, 1.0}  # 1: build_info only
    assert found["sluicegate_build_info"] and not found["sluicegate_upstream_errors_total"]


def test_a_count_adds_to_its_series_at_zero() -> None:
    metrics = GatewayMetrics(ACME)
    metrics.outcome(Outcome.COMPLETED, "acme", "chat")
    metrics.outcome(Outcome.COMPLETED, "acme", "chat")
    metrics.refused(401)
    found = series(metrics)
    completed = (("class", "chat"), ("outcome", "completed"), ("tenant", "acme"))
    assert found["sluicegate_outcomes_total"][completed] == 2.0
    assert found["sluicegate_invalid_requests_total"][(("status", "401"),)] == 1.0


def test_a_reload_removes_the_series_of_a_tenant_no_longer_named_and_keeps_other() -> None:
    metrics = GatewayMetrics(ACME)
    metrics.outcome(Outcome.COMPLETED, "acme", "chat")
    metrics.retries.labels("beta", "chat").inc()
    metrics.set_tenants(TenantLabels(frozenset({"acme", "gamma"}), (("acme", "chat"),)))
    metrics.outcome(Outcome.COMPLETED, "beta", "chat")  # beta's calls still in flight: other
    found = series(metrics)
    tenants = {
        name: {t for (t,) in _labels(found, name, "tenant")}
        for name in (
            "sluicegate_outcomes_total",
            "sluicegate_decisions_total",
            "sluicegate_queue_wait_seconds_count",
            "sluicegate_shed_total",
            "sluicegate_retries_total",
        )
    }
    assert tenants["sluicegate_outcomes_total"] == {"acme", OTHER}
    assert all(t <= {"acme", OTHER} and "acme" in t for t in tenants.values()), tenants
    kept = (("class", "chat"), ("outcome", "completed"), ("tenant", "acme"))
    assert found["sluicegate_outcomes_total"][kept] == 1.0


def test_each_backend_in_the_pool_has_its_upstream_error_series_until_it_leaves() -> None:
    metrics = GatewayMetrics(ACME)
    pool = {"a", "b"}
    metrics.follow_backends(lambda: pool)
    metrics.upstream_errors.labels("b", "connect").inc()
    found = series(metrics)
    errors = _labels(found, "sluicegate_upstream_errors_total", "backend", "kind")
    assert errors == {(b, k) for b in pool for k in UPSTREAM_ERROR_KINDS}
    pool.discard("b")
    errors = _labels(series(metrics), "sluicegate_upstream_errors_total", "backend", "kind")
    assert errors == {("a", k) for k in UPSTREAM_ERROR_KINDS}
