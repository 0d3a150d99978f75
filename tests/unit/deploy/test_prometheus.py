"""Alert rules and scrape config: well-formed, and every alert names exported metrics."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.config.schema import load_config
from policies.engine.queue_params import QueueParams
from tests.unit.deploy.conftest import DEPLOY, REPO, app_paths
from tests.unit.deploy.promql import unknown_names
from tests.unit.gateway.fakes import make_config

ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
SCRAPE = DEPLOY / "prometheus" / "scrape.yaml"
DURATION = re.compile(r"^\d+[smhd]$")


@pytest.fixture(scope="module")
def rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    out = {}
    for group in groups:
        for rule in group["rules"]:
            assert rule["alert"] not in out, f"duplicate alert {rule['alert']}"
            out[rule["alert"]] = rule
    return out


@pytest.fixture(scope="module")
def jobs() -> dict[str, dict[str, Any]]:
    return {j["job_name"]: j for j in yaml.safe_load(SCRAPE.read_text())["scrape_configs"]}


def test_every_rule_is_complete(rules: dict[str, dict[str, Any]]) -> None:
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert DURATION.match(rule.get("for", "0s")), name


def test_every_alert_parses_and_names_only_exported_metrics(
    rules: dict[str, dict[str, Any]], live_metric_names: set[str]
) -> None:
    assert unknown_names([r["expr"] for r in rules.values()], live_metric_names) == {}


def test_the_alerts_the_operators_asked_for_exist(rules: dict[str, dict[str, Any]]) -> None:
    wanted = {
        "SluicegateAllBackendsDown",
        "SluicegateShedRateHigh",
        "SluicegateBackendSignalsStale",
        "SluicegateConfigReloadFailing",
        "SluicegateQueueOldestAboveDefaultDeadline",
    }
    assert wanted <= set(rules)
    assert rules["SluicegateShedRateHigh"]["for"] == "5m"


def test_the_queue_age_threshold_is_the_default_wait_bound(
    rules: dict[str, dict[str, Any]],
) -> None:
    """The alert mirrors ``policy.queue.max_wait_s``: the policy default and the bound the
    Kubernetes config sets. If either changes, the alert must change with it."""
    expr = rules["SluicegateQueueOldestAboveDefaultDeadline"]["expr"]
    found = re.search(r">\s*([0-9.]+)\s*$", expr.strip())
    assert found is not None
    threshold = float(found.group(1))
    assert threshold == QueueParams().max_wait_s
    k8s = yaml.safe_load((DEPLOY / "kubernetes" / "configmap.yaml").read_text())
    policy = yaml.safe_load(k8s["data"]["config.yaml"])["policy"]
    assert policy["queue"]["max_wait_s"] == threshold


def test_alerts_select_the_job_the_scrape_config_defines(
    rules: dict[str, dict[str, Any]], jobs: dict[str, dict[str, Any]]
) -> None:
    assert "sluicegate" in jobs
    for name, rule in rules.items():
        assert 'job="sluicegate"' in rule["expr"], name


def test_the_gateway_job_scrapes_a_path_the_gateway_serves(jobs: dict[str, dict[str, Any]]) -> None:
    assert jobs["sluicegate"]["metrics_path"] in app_paths(make_config())


def test_the_vllm_job_targets_the_example_configs_backends(jobs: dict[str, dict[str, Any]]) -> None:
    example = load_config(REPO / "config.example.yaml").config
    backends = {urlsplit(b.url).netloc for b in example.backends}
    targets = {t for sc in jobs["vllm"]["static_configs"] for t in sc["targets"]}
    assert targets == backends
