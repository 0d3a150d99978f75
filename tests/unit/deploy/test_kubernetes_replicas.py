"""The replicated-gateway manifests (deploy/kubernetes/replicas/) fit together: the config
passes the gateway's check, the password comes from the Secret the Redis uses, the PDB and the HPA
select the Deployment, and the HPA never goes below what the PDB and the fallback assume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from commands.check_config import check_file
from tests.unit.deploy.conftest import DEPLOY

FLEET = DEPLOY / "kubernetes" / "replicas"


@pytest.fixture(scope="module")
def docs() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted(FLEET.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_the_fleet_config_passes_the_check_and_shares_state_through_redis(
    docs: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(docs[("ConfigMap", "sluicegate-config")]["data"]["config.yaml"])
    loaded, issues = check_file(path)
    assert issues == [] and loaded is not None
    state = loaded.config.state
    assert state.backend == "redis" and state.url is not None
    assert state.url.split("//")[1].split(":")[0] == "sluicegate-redis"
    assert ("Service", "sluicegate-redis") in docs
    gateway = docs[("Deployment", "sluicegate")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in gateway["env"]}
    secret = env[state.password_env]["valueFrom"]["secretKeyRef"]
    redis = docs[("Deployment", "sluicegate-redis")]["spec"]["template"]["spec"]["containers"][0]
    assert secret == redis["env"][0]["valueFrom"]["secretKeyRef"]
    hpa = docs[("HorizontalPodAutoscaler", "sluicegate")]["spec"]
    assert state.initial_replicas == hpa["minReplicas"]


def test_the_pdb_and_the_hpa_hold_the_gateway_deployment(
    docs: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = docs[("Deployment", "sluicegate")]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    pdb = docs[("PodDisruptionBudget", "sluicegate")]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    hpa = docs[("HorizontalPodAutoscaler", "sluicegate")]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "sluicegate",
    }
    assert hpa["minReplicas"] > pdb["minAvailable"]
    assert hpa["minReplicas"] <= deployment["spec"]["replicas"] <= hpa["maxReplicas"]
