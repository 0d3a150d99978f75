"""Prometheus's HTTP API (``/api/v1``), and the dashboard's queries as Grafana sends them.

Grafana replaces ``$job``, ``$instance`` and ``$backend`` by the variable's current value;
the shipped dashboard selects "All" for each, and a multi-value "All" with ``allValue``
set is replaced by that regex. ``$__rate_interval`` is
``max($__interval + scrape interval, 4 x scrape interval)`` (Grafana's documented formula);
with a range step no longer than the scrape interval that is 4 x the scrape interval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

POLL_S = 0.2


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    expr: str


class PrometheusAPI:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def _get(self, path: str, **params: Any) -> Any:
        reply = httpx.get(f"{self.base_url}/api/v1/{path}", params=params, timeout=10.0)
        body = reply.json()
        assert body["status"] == "success", f"{path} {params}: {body}"
        return body["data"]

    def instant(self, expr: str) -> list[dict[str, Any]]:
        data = self._get("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self._get("query_range", query=expr, start=start, end=end, step=step)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self._get("alerts")["alerts"]
        return alerts

    def alert_state(self, name: str) -> str | None:
        """``firing`` over ``pending`` when several instances of the alert exist."""
        states = {a["state"] for a in self.alerts() if a["labels"]["alertname"] == name}
        return "firing" if "firing" in states else next(iter(states), None)

    def rules_evaluated_after(self, moment: float) -> bool:
        """Every rule group has been evaluated since ``moment`` (unix seconds)."""
        groups = self._get("rules")["groups"]
        return bool(groups) and all(_rfc3339(g["lastEvaluation"]) > moment for g in groups)

    def targets_up(self) -> dict[str, float]:
        return {
            f"{r['metric']['job']}/{r['metric']['instance']}": float(r["value"][1])
            for r in self.instant("up")
        }


def _rfc3339(stamp: str) -> float:
    """Prometheus's RFC 3339 timestamps (nanoseconds, ``Z``) as unix seconds."""
    return datetime.fromisoformat(stamp).timestamp()


def poll(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``check`` until true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(POLL_S)


def finite_values(series: list[dict[str, Any]]) -> list[float]:
    """The values of a range result that are numbers (not NaN, not +-Inf)."""
    values = (float(value) for s in series for _, value in s["values"])
    return [v for v in values if math.isfinite(v)]


def grafana_variables(dashboard: dict[str, Any]) -> dict[str, str]:
    """Each template variable's current value as Grafana substitutes it in a query."""
    out = {}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue  # the data source variable is not part of any PromQL
        current = var["current"]["value"]
        values = current if isinstance(current, list) else [current]
        if values == ["$__all"]:
            out[var["name"]] = var["allValue"]
        else:
            out[var["name"]] = "|".join(values)
    return out


def substitute(expr: str, variables: dict[str, str], rate_interval: str) -> str:
    """``expr`` with ``$__rate_interval`` and every ``$name``/``${name}`` replaced."""
    expr = expr.replace("$__rate_interval", rate_interval)
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def panels_by_row(dashboard: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each row's title -> its panels: a collapsed row's own, or those after an open row
    up to the next row ("" for panels before any row)."""
    out: dict[str, list[dict[str, Any]]] = {"": []}
    row = ""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            out[row] = list(panel.get("panels", []))
        else:
            out[row].append(panel)
    return out


def panel_queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    """Every query of every panel (nested rows included) and of the annotations."""
    panels = [p for row in panels_by_row(dashboard).values() for p in row]
    out = [PanelQuery(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]
    out += [
        PanelQuery(f"annotation: {a['name']}", a["expr"])
        for a in dashboard["annotations"]["list"]
        if "expr" in a
    ]
    return out


def query_series(
    prometheus: PrometheusAPI,
    dashboard: dict[str, Any],
    span: tuple[float, float],
    step: float,
    rate_interval: str,
) -> list[tuple[PanelQuery, list[dict[str, Any]]]]:
    """Every query of the dashboard with Grafana's substitution, asked as a range query over
    ``span`` (unix seconds): its series (each with its values)."""
    variables = grafana_variables(dashboard)
    return [
        (q, prometheus.range(substitute(q.expr, variables, rate_interval), *span, step))
        for q in panel_queries(dashboard)
    ]


def variable_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    """Each query variable's ``label_values(selector, label)`` query."""
    return {
        v["name"]: v["query"]["query"]
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    }
