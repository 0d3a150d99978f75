"""The Grafana dashboard imports, every panel queries, and every query names metrics a
live gateway exports."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from gateway.metrics.features import FEATURES
from tests.prometheus.api import panels_by_row
from tests.unit.deploy.conftest import DEPLOY
from tests.unit.deploy.promql import metric_names, template_selector, unknown_names

DASHBOARD = DEPLOY / "grafana" / "sluicegate.json"
FEATURE = re.compile(r'sluicegate_feature_enabled\{[^}]*feature="(\w+)"')


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel that shows data (rows are containers), nested rows included."""
    out = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            out += panel.get("panels", [])
        else:
            out.append(panel)
    return out


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    exprs += [
        template_selector(v["query"]["query"])
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    ]
    return exprs


def test_it_is_an_importable_dashboard_with_a_prometheus_input(dashboard: dict[str, Any]) -> None:
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_every_panel_has_a_query_on_the_input_datasource(dashboard: dict[str, Any]) -> None:
    panels = _panels(dashboard)
    assert panels
    for panel in panels:
        targets = panel.get("targets", [])
        assert targets, f"panel {panel['title']!r} has no query"
        for target in targets:
            assert target["expr"].strip(), f"panel {panel['title']!r} has an empty query"
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}"


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        xs, ys = range(g["x"], g["x"] + g["w"]), range(g["y"], g["y"] + g["h"])
        cells = {(x, y) for x in xs for y in ys}
        assert g["x"] + g["w"] <= 24, panel["title"]
        assert not cells & taken, f"{panel['title']!r} overlaps another panel"
        taken |= cells


def test_every_query_parses_and_names_only_exported_metrics(
    dashboard: dict[str, Any], live_metric_names: set[str]
) -> None:
    exprs = _exprs(dashboard)
    assert len(exprs) > 20
    assert unknown_names(exprs, live_metric_names) == {}


def test_the_sre_topics_are_on_the_dashboard(dashboard: dict[str, Any]) -> None:
    """Each topic the dashboard exists for is charted from the metric that measures it."""
    used = set().union(*(metric_names(e) for e in _exprs(dashboard)))
    topics = {
        "decisions and shed %": "sluicegate_decisions_total",
        "outcomes": "sluicegate_outcomes_total",
        "queue depth": "sluicegate_queue_depth",
        "work-weighted backlog": "sluicegate_backlog_tokens",
        "oldest queued age": "sluicegate_oldest_queued_age_seconds",
        "queue wait quantiles": "sluicegate_queue_wait_seconds_bucket",
        "backend health": "sluicegate_backend_health",
        "running": "sluicegate_backend_running",
        "waiting": "sluicegate_backend_waiting",
        "KV usage": "sluicegate_backend_kv_cache_usage",
        "capacity estimate": "sluicegate_backend_capacity_estimate",
        "vLLM queue time p90": "sluicegate_backend_queue_time_p90_seconds",
        "signal age": "sluicegate_backend_signal_age_seconds",
        "in flight": "sluicegate_in_flight",
        "in flight per backend": "sluicegate_backend_in_flight",
        "deficit per tenant": "sluicegate_tenant_deficit_tokens",
        "estimated tokens": "sluicegate_estimated_tokens_total",
        "actual tokens": "sluicegate_actual_tokens_total",
        "deadlines": "sluicegate_deadlines_total",
        "retries": "sluicegate_retries_total",
        "config reloads": "sluicegate_config_reloads_total",
        "agent runs started": "sluicegate_runs_started_total",
        "agent runs ended": "sluicegate_runs_ended_total",
        "run latency": "sluicegate_run_latency_seconds_bucket",
        "wasted tokens": "sluicegate_run_wasted_tokens_total",
        "reservations outstanding": "sluicegate_run_reserved_tokens",
        "async jobs handed off": "sluicegate_async_jobs_queued_total",
        "async jobs ended (done, expired, ...)": "sluicegate_async_jobs_ended_total",
        "async jobs pending": "sluicegate_async_jobs_pending",
    }
    missing = {topic: name for topic, name in topics.items() if name not in used}
    assert missing == {}


def test_a_feature_row_opens_with_its_stat_and_every_panel_says_what_it_shows_when_off(
    dashboard: dict[str, Any],
) -> None:
    """The row of an optional feature starts with a stat of ``sluicegate_feature_enabled``
    that reads "off: ..." or "on"; each other panel of the row says what it shows while the
    feature is off (No data, or 0), so an empty panel there never reads as broken."""
    features = {}
    for row, panels in panels_by_row(dashboard).items():
        found = [
            (i, m.group(1))
            for i, p in enumerate(panels)
            for t in p.get("targets", [])
            if (m := FEATURE.search(t["expr"]))
        ]
        if not found:
            continue
        assert [i for i, _ in found] == [0], row
        stat = panels[0]
        assert stat["type"] == "stat", row
        (mapping,) = stat["fieldConfig"]["defaults"]["mappings"]
        texts = {value: option["text"] for value, option in mapping["options"].items()}
        assert texts["1"] == "on" and texts["0"].startswith("off: "), texts
        phrase = stat["title"].lower()
        for panel in panels[1:]:
            said = panel["description"].lower()
            assert phrase in said and re.search(r"\b(is|are) off\b", said), panel["title"]
        features[found[0][1]] = row
    assert set(features) == {"agent_runs", "async_jobs"}
    assert set(features) <= {name for name, _ in FEATURES}
