"""The shipped alerts, evaluated by a real Prometheus on a live gateway (``for:`` shortened to
a few seconds, expressions as shipped): silent in a quiet run, and pending then firing when
their condition is made real. The alerts that need hours, a broken install or a second
replica are covered by ``promtool test rules`` (test_alert_rules.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.prometheus.fleet import INTERVAL_S, Run
from tests.prometheus.processes import DEPLOY_PROMETHEUS

pytestmark = pytest.mark.prometheus

SEEN_FIRING = (
    "SluicegateShedRateHigh",
    "SluicegateConfigReloadFailing",
    "SluicegateAllBackendsDown",
    "SluicegateAbsent",
)


def _shipped_rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load((DEPLOY_PROMETHEUS / "alerts.yaml").read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def _first(run: Run, name: str, state: str) -> float | None:
    """When the ``ALERTS`` series Prometheus records first showed ``name`` in ``state``."""
    series = run.prometheus.range(
        f'ALERTS{{alertname="{name}", alertstate="{state}"}}',
        run.started,
        run.gateway_stopped + 60,
        INTERVAL_S / 2,
    )
    stamps = [float(t) for s in series for t, _ in s["values"]]
    return min(stamps) if stamps else None


def test_no_alert_is_pending_or_firing_in_the_quiet_run(observed: Run) -> None:
    seen = observed.prometheus.range("ALERTS", observed.started, observed.quiet_until, 0.5)
    assert seen == [], [s["metric"] for s in seen]


@pytest.mark.parametrize("name", SEEN_FIRING)
def test_the_alert_fired_under_its_condition(observed: Run, name: str) -> None:
    firing = _first(observed, name, "firing")
    assert firing is not None and firing > observed.quiet_until, observed.timeline
    pending = _first(observed, name, "pending")
    if "for" in _shipped_rules()[name]:
        assert pending is not None and pending < firing, (pending, firing)
    else:
        assert pending is None  # no `for:`: firing from the first evaluation


def test_the_scenario_made_the_decisions_the_alerts_and_panels_are_for(observed: Run) -> None:
    at = observed.gateway_stopped - INTERVAL_S
    decisions = _sums(observed, "sum by (decision) (sluicegate_decisions_total)", at)
    assert {"admit", "delay", "degrade", "reject"} <= {k for k, v in decisions.items() if v > 0}
    outcomes = _sums(observed, "sum by (outcome) (sluicegate_outcomes_total)", at)
    assert outcomes.get("rejected", 0) > 0 and outcomes.get("completed", 0) > 0, outcomes
    assert {429, 503, 401, 400} <= set(observed.statuses), observed.statuses


def _sums(run: Run, expr: str, at: float) -> dict[str, float]:
    data = run.prometheus._get("query", query=expr, time=at)["result"]
    return {next(iter(r["metric"].values()), ""): float(r["value"][1]) for r in data}
