"""The dashboard against Grafana's own schema, without Grafana: grafana-foundation-sdk (Grafana
Labs' generated types, for the Grafana version deploy/compose/ runs) parses the JSON into its
typed models and writes it back. A key the schema does not know is dropped on the way, so the
round trip loses exactly the keys that are not Grafana dashboard schema; those are listed
here with the reason they are in the file anyway. Panel options are parsed by each panel
type's own schema (the SDK's panel plugins), queries by the Prometheus query schema.

Why the JSON stays the source rather than SDK builder code: the SDK is alpha (its version
scheme and builder API change between releases), the JSON is what Grafana imports and what
tests/prometheus/ asks a real Prometheus with, and this round trip already checks its schema.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from tests.unit.deploy.conftest import DEPLOY

DASHBOARD = DEPLOY / "grafana" / "sluicegate.json"

NOT_DASHBOARD_SCHEMA = {
    "/__inputs": "import-time metadata: the data source Grafana's import dialog asks for",
    "/__requires": "import-time metadata: the Grafana version and plugins the import checks",
    "/annotations/list[0]/titleFormat": "an option of the Prometheus data source's annotation "
    "queries, kept by its plugin, outside the core annotation schema",
    "/annotations/list[0]/step": "likewise (the annotation query's resolution)",
    "/templating/list[1]/definition": "the query as the variable editor displays it",
    "/templating/list[2]/definition": "likewise",
    "/templating/list[3]/definition": "likewise",
}


def _dropped(before: Any, after: Any, path: str = "") -> set[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        out = {f"{path}/{k}" for k in before if k not in after}
        for key in before.keys() & after.keys():
            out |= _dropped(before[key], after[key], f"{path}/{key}")
        return out
    if isinstance(before, list) and isinstance(after, list):
        assert len(before) == len(after), path
        return set().union(
            *(
                _dropped(b, a, f"{path}[{i}]")
                for i, (b, a) in enumerate(zip(before, after, strict=True))
            )
        )
    assert before == after, f"{path}: {before!r} became {after!r}"
    return set()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    register_default_plugins()  # panel options and queries parsed by their own schemas
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _round_trip(data: dict[str, Any]) -> dict[str, Any]:
    back: dict[str, Any] = json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))
    return back


def test_the_schema_round_trip_loses_only_the_listed_non_schema_keys(
    dashboard: dict[str, Any],
) -> None:
    assert _dropped(dashboard, _round_trip(dashboard)) == set(NOT_DASHBOARD_SCHEMA)


def test_a_key_outside_the_schema_is_caught(dashboard: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(dashboard))
    broken["panels"][1]["gridPosition"] = broken["panels"][1].pop("gridPos")
    assert "/panels[1]/gridPosition" in _dropped(broken, _round_trip(broken))


def test_every_panel_type_has_a_schema_in_the_sdk(dashboard: dict[str, Any]) -> None:
    types = {p["type"] for p in dashboard["panels"]} - {"row"}
    assert types and all(cogruntime.panelcfg_config(t) is not None for t in types), types
