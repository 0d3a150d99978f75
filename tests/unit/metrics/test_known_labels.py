"""The label values known before any request: configured tenants (the first
``tenant_label_limit``, the rest as ``other``) with their default classes, and the decision
kind each reason belongs to."""

from __future__ import annotations

from typing import Any

from gateway.config.schema import GatewayConfig
from gateway.metrics.known_labels import DECISION_REASONS, OTHER, tenant_labels
from policies.types import DecisionKind, Reason


def _config(limit: int, *tenants: dict[str, Any]) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "server": {"tenant_label_limit": limit},
            "workload_classes": ["interactive", "batch", "background"],
            "tenants": list(tenants),
            "backends": [{"name": "a", "url": "http://a.test", "models": ["m"]}],
        }
    )


def test_each_named_tenant_comes_with_its_default_class() -> None:
    labels = tenant_labels(
        _config(
            5,
            {"name": "acme", "workload_classes": ["batch"]},
            {"name": "beta"},
            {"name": "gamma", "default_class": "background"},
        )
    )
    assert labels.named == {"acme", "beta", "gamma"}
    assert labels.pairs == (("acme", "batch"), ("beta", "interactive"), ("gamma", "background"))
    assert labels.tenants == ("acme", "beta", "gamma")


def test_tenants_past_the_limit_are_other_with_the_default_class_of_each() -> None:
    labels = tenant_labels(
        _config(
            1,
            {"name": "acme", "workload_classes": ["batch"]},
            {"name": "beta", "workload_classes": ["interactive"]},
            {"name": "gamma", "workload_classes": ["batch", "interactive"]},
            {"name": "delta", "workload_classes": ["background"]},
        )
    )
    assert labels.named == {"acme"}
    assert labels.pairs == (("acme", "batch"), (OTHER, "interactive"), (OTHER, "background"))
    assert labels.tenants == ("acme", OTHER)
    assert labels.known(OTHER) and labels.known("acme") and not labels.known("beta")


def test_no_other_when_every_tenant_is_named() -> None:
    labels = tenant_labels(_config(2, {"name": "acme"}, {"name": "beta"}))
    assert OTHER not in labels.tenants


def test_every_reason_belongs_to_one_kind_and_only_three_explain_no_rejection() -> None:
    kinds = dict((reason, kind) for kind, reason in DECISION_REASONS)
    assert set(kinds) == {r.value for r in Reason} and len(DECISION_REASONS) == len(Reason)
    assert {k: r for r, k in kinds.items() if k != DecisionKind.REJECT.value} == {
        "admit": Reason.CAPACITY_AVAILABLE.value,
        "delay": Reason.QUEUED_FOR_CAPACITY.value,
        "degrade": Reason.DEGRADED_UNDER_LOAD.value,
    }
