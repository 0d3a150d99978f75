"""The Kubernetes manifests parse, fit together, carry a config the gateway accepts, and
probe paths that answer as the manifests say."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from commands.check_config import check_file
from gateway.app import create_app
from gateway.config.schema import load_config
from tests.unit.deploy.conftest import DEPLOY, REPO, app_paths
from tests.unit.gateway.fakes import FakeBackend, FakeFleet

K8S = DEPLOY / "kubernetes"


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    by_kind: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] not in by_kind, f"two {doc['kind']}s"
            by_kind[doc["kind"]] = doc
    assert set(by_kind) == {"ConfigMap", "Deployment", "Service"}
    return by_kind


@pytest.fixture
def config_file(manifests: dict[str, dict[str, Any]], tmp_path: Path) -> Path:
    """The ConfigMap's config, written where the container would read it."""
    data = manifests["ConfigMap"]["data"]
    assert list(data) == ["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(data["config.yaml"])
    return path


def _container(manifests: dict[str, Any]) -> dict[str, Any]:
    containers = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def test_the_configmap_config_passes_the_gateways_own_check(config_file: Path) -> None:
    loaded, issues = check_file(config_file)
    assert issues == [] and loaded is not None


def test_the_container_reads_the_mounted_configmap_without_subpath(
    manifests: dict[str, dict[str, Any]],
) -> None:
    pod = manifests["Deployment"]["spec"]["template"]["spec"]
    container = _container(manifests)
    args = container["args"]
    config_path = Path(args[args.index("--config") + 1])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    assert "subPath" not in mount  # subPath mounts never see ConfigMap updates (no reload)
    assert volumes[mount["name"]]["configMap"]["name"] == manifests["ConfigMap"]["metadata"]["name"]
    assert config_path.name in manifests["ConfigMap"]["data"]


def test_the_gateway_listens_where_the_pod_and_service_send_traffic(
    manifests: dict[str, dict[str, Any]], config_file: Path
) -> None:
    server = load_config(config_file).config.server
    assert server.host == "0.0.0.0"  # loopback would be unreachable from the Service
    ports = {p["name"]: p["containerPort"] for p in _container(manifests)["ports"]}
    assert ports["http"] == server.port
    service = manifests["Service"]["spec"]
    assert [p["targetPort"] for p in service["ports"]] == ["http"]
    pod_labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= pod_labels.items()
    selector = manifests["Deployment"]["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()


def test_it_runs_as_the_images_non_root_user_with_resources(
    manifests: dict[str, dict[str, Any]],
) -> None:
    pod_security = manifests["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    image_user = re.search(r"^USER\s+(\d+)\s*$", (REPO / "Dockerfile").read_text(), re.M)
    assert image_user is not None and pod_security["runAsUser"] == int(image_user.group(1)) != 0
    container = _container(manifests)
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]


def test_the_probe_paths_are_served(
    manifests: dict[str, dict[str, Any]], config_file: Path
) -> None:
    container = _container(manifests)
    probes = {k: container[k]["httpGet"] for k in ("readinessProbe", "livenessProbe")}
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert {p["port"] for p in probes.values()} == {"http"}
    served = app_paths(load_config(config_file).config)
    assert {p["path"] for p in probes.values()} <= served


async def test_readiness_follows_the_backends_and_liveness_does_not(config_file: Path) -> None:
    """What deployment.yaml promises: /readyz 503 when every backend is down (the pod
    leaves the Service), /healthz 200 regardless (no restart for a vLLM outage)."""
    loaded = load_config(config_file)
    fleet = FakeFleet(*(FakeBackend(b.name) for b in loaded.config.backends))
    app = create_app(loaded, transport=fleet.transport, background=False)
    async with app.router.lifespan_context(app):
        pool = app.state.ctx.pool
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            await pool.probe_all()
            assert (await client.get("/readyz")).status_code == 200
            for backend in fleet.backends.values():
                backend.healthy = False
            for _ in range(loaded.config.health.failures_to_down):
                await pool.probe_all()
            assert (await client.get("/readyz")).status_code == 503
            assert (await client.get("/healthz")).status_code == 200
