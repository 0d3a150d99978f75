"""Every query of the shipped Grafana dashboard, with its variables substituted as Grafana
would, asked of a real Prometheus after the scenario run (tests/prometheus/scenario.py):
each returns numbers, except the ones listed as empty by design, which return nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.prometheus.api import (
    finite_values,
    grafana_variables,
    panel_queries,
    query_series,
    substitute,
    variable_queries,
)
from tests.prometheus.fleet import INTERVAL_S, RATE_INTERVAL, Run

pytestmark = pytest.mark.prometheus

EMPTY_BY_DESIGN: dict[str, str] = {}
"""Panels whose queries return no series at all after the scenario (none today)."""

ZERO_BY_DESIGN = {
    "Waiting (vLLM)": "the gateway queues instead of vLLM: the server_signals limit admits "
    "only while a backend's waiting count is below max_waiting, so it stays 0",
}
"""Panels that return numbers, all of them 0, in this scenario, and why."""

MAY_BE_ZERO = {
    "Open runs and calls waiting for a branch": "its open-runs query is non-zero (the "
    "scenario waits until Prometheus has scraped a run open); its calls-waiting query is 0: "
    "a call held by its run's fan-out ceiling waits for one call's length, shorter than a "
    "scrape (the ceiling is checked at the engine in tests/integration/test_runs.py)",
}
"""Panels that return numbers which may all be 0 (for one of their queries), depending on
how the moments they count fall between scrapes."""


def panel_results(run: Run, dashboard: dict[str, Any]) -> dict[str, list[float]]:
    """``panel | query`` -> its finite values over the run, as the dashboard would draw them."""
    span = (run.started, run.ended)
    answers = query_series(run.prometheus, dashboard, span, INTERVAL_S, RATE_INTERVAL)
    return {f"{q.panel} | {q.expr}": finite_values(series) for q, series in answers}


def _panels_where(results: dict[str, list[float]], test: Any) -> set[str]:
    return {key.split(" | ", 1)[0] for key, values in results.items() if test(values)}


def test_every_panel_query_returns_data_except_the_empty_by_design(
    observed: Run, dashboard: dict[str, Any]
) -> None:
    results = panel_results(observed, dashboard)
    assert len(results) == len(panel_queries(dashboard)) > 20
    assert _panels_where(results, lambda v: not v) == set(EMPTY_BY_DESIGN)
    zero = _panels_where(results, lambda v: v and not any(v))
    assert set(ZERO_BY_DESIGN) <= zero <= set(ZERO_BY_DESIGN) | set(MAY_BE_ZERO), zero


def test_every_variable_lists_the_fleet(observed: Run, dashboard: dict[str, Any]) -> None:
    """``label_values(selector, label)`` as Grafana resolves it: the label's values on the
    series the selector matches (``$job`` substituted first)."""
    variables = grafana_variables(dashboard)
    found = {}
    for name, query in variable_queries(dashboard).items():
        selector, label = query[len("label_values(") : -1].rsplit(",", 1)
        values = observed.prometheus._get(
            f"label/{label.strip()}/values",
            **{
                "match[]": substitute(selector, variables, RATE_INTERVAL),
                "start": observed.started,
                "end": observed.gateway_stopped,
            },
        )
        found[name] = set(values)
    assert found["job"] == {"sluicegate"}
    assert len(found["instance"]) == 1
    assert found["backend"] == {"emu-0", "emu-1"}
