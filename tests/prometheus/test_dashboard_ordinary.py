"""The shipped dashboard on an ordinary day (tests/prometheus/ordinary.py), asked of a real
Prometheus as Grafana would: every query returns at least one series, so a panel at zero
reads as zero and never as "No data", except the panels of a feature that is off. Those
say so: they sit in a row whose feature stat reads ``sluicegate_feature_enabled{feature}``,
which the gateway exports as 0 for that feature in this run."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.prometheus.api import panels_by_row, query_series
from tests.prometheus.fleet import INTERVAL_S, RATE_INTERVAL, Run

pytestmark = pytest.mark.prometheus

FEATURE = re.compile(r'sluicegate_feature_enabled\{[^}]*feature="(\w+)"')


def row_features(dashboard: dict[str, Any]) -> dict[str, str]:
    """The title of each panel in a row with a feature stat -> that feature."""
    out = {}
    for panels in panels_by_row(dashboard).values():
        exprs = " ".join(t["expr"] for p in panels for t in p.get("targets", []))
        found = set(FEATURE.findall(exprs))
        assert len(found) <= 1, found
        out |= {p["title"]: feature for p in panels for feature in found}
    return out


def features_off(run: Run) -> set[str]:
    found = run.prometheus.instant("sluicegate_feature_enabled == 0")
    return {r["metric"]["feature"] for r in found}


def test_every_query_returns_a_series_unless_its_panel_says_its_feature_is_off(
    ordinary: Run, dashboard: dict[str, Any]
) -> None:
    off = features_off(ordinary)
    feature_of = row_features(dashboard)
    span = (ordinary.started, ordinary.ended)
    answers = query_series(ordinary.prometheus, dashboard, span, INTERVAL_S, RATE_INTERVAL)
    assert len(answers) > 40
    empty = [f"{q.panel} | {q.expr}" for q, series in answers if not series]
    unexplained = [key for key in empty if feature_of.get(key.split(" | ")[0]) not in off]
    listed = "\n".join(unexplained)
    assert not unexplained, f"{len(unexplained)} of {len(answers)} return no series:\n{listed}"


def test_the_feature_stats_answer_and_the_day_runs_without_runs_and_async_jobs(
    ordinary: Run, dashboard: dict[str, Any]
) -> None:
    assert set(row_features(dashboard).values()) == {"agent_runs", "async_jobs"}
    assert {"agent_runs", "async_jobs"} <= features_off(ordinary)


def test_the_day_was_ordinary(ordinary: Run) -> None:
    """Calls answered, some refused by the quota; nothing else."""
    assert set(ordinary.statuses) == {200, 429}, ordinary.statuses
    reasons = ordinary.prometheus.instant(
        'sum by (reason) (sluicegate_decisions_total{decision="reject"}) > 0'
    )
    assert {r["metric"]["reason"] for r in reasons} == {"tenant_concurrency_exceeded"}
