"""deploy/kubernetes/epp/: Sluicegate as the Endpoint Picker of an InferencePool behind
Envoy Gateway. Every object rendered by ``kubectl kustomize`` is valid: the built-in kinds
against the Kubernetes schemas (kubernetes-validate), the InferencePool and the Gateway API
objects against their CRDs' schemas (tests/fixtures/crd-schemas/, cut from the CRDs by
scripts/crd_schemas.py, source and commit named inside). And the objects fit together: the
pool points at the picker's Service, selects the vLLM pods on their port, the picker's config
passes check-config and discovers that pool, RBAC lets it read what it watches, the route
sends to the pool."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from commands.check_config import check_file
from tests.unit.deploy.conftest import DEPLOY, REPO, app_paths
from tests.unit.deploy.test_kubernetes_fleet import SCHEMA_VERSIONS, kustomize
from tests.unit.epp.certs import TestCa

EPP = DEPLOY / "kubernetes" / "epp"
SCHEMAS = REPO / "tests" / "fixtures" / "crd-schemas"
Objects = dict[str, dict[str, Any]]


@functools.cache
def crd_schemas() -> dict[str, Any]:
    """``group/version/Kind`` → the JSON schema of that custom resource."""
    out: dict[str, Any] = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        doc = json.loads(path.read_text())
        assert " at " in doc["$comment"], f"{path.name} must name its source and commit"
        out.update(doc["schemas"])
    return out


def _validate(obj: dict[str, Any], version: str) -> None:
    schema = crd_schemas().get(f"{obj['apiVersion']}/{obj['kind']}")
    if schema is None:
        kubernetes_validate.validate(obj, version, strict=True)
    else:
        jsonschema.validate(obj, schema)


def _objects(path: Path) -> Objects:
    objects = {f"{o['kind']}/{o['metadata']['name']}": o for o in kustomize(path)}
    return objects


@pytest.fixture(scope="module")
def epp() -> Objects:
    return _objects(EPP)


@pytest.fixture(scope="module")
def gateway() -> Objects:
    return _objects(EPP / "envoy-gateway")


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_object_is_valid_against_its_schema(
    epp: Objects, gateway: Objects, version: str
) -> None:
    kinds = {o["kind"] for o in [*epp.values(), *gateway.values()]}
    assert {"InferencePool", "HTTPRoute", "Gateway", "GatewayClass", "Certificate"} <= kinds
    for obj in [*epp.values(), *gateway.values()]:
        _validate(obj, version)


@pytest.mark.parametrize(
    ("key", "path", "value"),
    [
        ("InferencePool/vllm-llama", ("spec", "targetPorts", 0, "number"), "8000"),
        ("InferencePool/vllm-llama", ("spec", "endpointPickerRef", "failureMode"), "Closed"),
        ("InferencePool/vllm-llama", ("spec", "selector", "matchLabel"), {"a": "b"}),
        ("HTTPRoute/vllm-llama", ("spec", "rules", 0, "backendRef"), []),
        ("Deployment/sluicegate-epp", ("spec", "replicas"), "one"),
        ("Certificate/sluicegate-epp-tls", ("spec", "dnsName"), ["sluicegate-epp"]),
        ("Issuer/sluicegate-epp-ca", ("spec", "ca", "secretName"), 7),
    ],
)
def test_the_schema_check_can_fail(
    epp: Objects, gateway: Objects, key: str, path: tuple[str | int, ...], value: Any
) -> None:
    obj = json.loads(json.dumps({**epp, **gateway}[key]))
    node = obj
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        _validate(obj, SCHEMA_VERSIONS[-1])


def _config(epp: Objects, tmp_path: Path) -> Path:
    """The ConfigMap's config, its TLS files pointed at local copies (check-config reads
    them; in the pod they are the Secret's)."""
    config = yaml.safe_load(epp["ConfigMap/sluicegate-epp-config"]["data"]["config.yaml"])
    tls = config["epp"]["tls"]
    ca = TestCa()
    ca.issue("sluicegate-epp").write(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert set(tls) == {"cert_file", "key_file"}  # no client certificate from the gateway
    tls.update(cert_file=str(tmp_path / "tls.crt"), key_file=str(tmp_path / "tls.key"))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _container(epp: Objects) -> dict[str, Any]:
    (container,) = epp["Deployment/sluicegate-epp"]["spec"]["template"]["spec"]["containers"]
    found: dict[str, Any] = container
    return found


def test_the_pool_points_at_the_pickers_service_and_port(epp: Objects) -> None:
    ref = epp["InferencePool/vllm-llama"]["spec"]["endpointPickerRef"]
    service = epp[f"Service/{ref['name']}"]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]
    container = _container(epp)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == ref["port"]["number"] == 9002
    args = container["args"]
    assert container["command"] == ["sluicegate", "epp"]
    assert int(args[args.index("--port") + 1]) == ports["grpc"]
    assert args[args.index("--host") + 1] == "0.0.0.0"
    labels = epp["Deployment/sluicegate-epp"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    probes = [container[k]["httpGet"] for k in ("readinessProbe", "livenessProbe")]
    assert [(p["port"], p["path"]) for p in probes] == [("http", "/readyz"), ("http", "/healthz")]
    assert service["spec"]["clusterIP"] == "None"  # DNS names every replica to the gateway


def test_the_probe_paths_are_served(epp: Objects, tmp_path: Path) -> None:
    loaded, _ = check_file(_config(epp, tmp_path))
    assert loaded is not None
    container = _container(epp)
    paths = {container[k]["httpGet"]["path"] for k in ("readinessProbe", "livenessProbe")}
    assert paths <= app_paths(loaded.config)


def test_the_pool_selects_the_vllm_pods_on_their_port(epp: Objects) -> None:
    spec = epp["InferencePool/vllm-llama"]["spec"]
    template = epp["Deployment/vllm-llama"]["spec"]["template"]
    assert spec["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (vllm,) = template["spec"]["containers"]
    assert [p["number"] for p in spec["targetPorts"]] == [vllm["ports"][0]["containerPort"]]
    assert "readinessProbe" in vllm  # readiness is what the picker follows


def test_the_pickers_config_passes_check_config_and_discovers_that_pool(
    epp: Objects, tmp_path: Path
) -> None:
    loaded, issues = check_file(_config(epp, tmp_path))
    assert issues == [] and loaded is not None
    found = loaded.config.discovery
    assert found is not None and found.kubernetes.inference_pool == "vllm-llama"
    assert found.kubernetes.namespace is None  # the pod's own: where the pool is
    args = epp["Deployment/vllm-llama"]["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in args)
    assert found.kubernetes.models == [flags["served-model-name"]]
    assert found.kubernetes.max_num_seqs == int(flags["max-num-seqs"])
    assert (
        loaded.config.server.port
        == {p["name"]: p["containerPort"] for p in _container(epp)["ports"]}["http"]
    )


def test_the_config_is_mounted_so_edits_reload(epp: Objects) -> None:
    pod = epp["Deployment/sluicegate-epp"]["spec"]["template"]["spec"]
    container = _container(epp)
    args = container["args"]
    config_path = Path(args[args.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    assert "subPath" not in mount
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "sluicegate-epp-config"  # no hash suffix


def test_the_picker_serves_tls_from_the_certificates_secret(epp: Objects) -> None:
    """The config's TLS files are in the mounted Secret, the one the Certificate renews,
    for the Service's names, readable by the picker's group; the probes stay cleartext."""
    pod = epp["Deployment/sluicegate-epp"]["spec"]["template"]["spec"]
    container = _container(epp)
    config = yaml.safe_load(epp["ConfigMap/sluicegate-epp-config"]["data"]["config.yaml"])
    tls = config["epp"]["tls"]
    folders = {str(Path(tls[k]).parent) for k in ("cert_file", "key_file")}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] in folders]
    assert "subPath" not in mount  # a subPath mount never sees a renewal
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]["secretName"]
    assert {Path(tls[k]).name for k in ("cert_file", "key_file")} == {"tls.crt", "tls.key"}
    certificate = epp[f"Certificate/{secret}"]["spec"]
    assert certificate["secretName"] == secret
    service = epp["Service/sluicegate-epp"]["metadata"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["dnsNames"]
    issuer = epp[f"Issuer/{certificate['issuerRef']['name']}"]["spec"]
    assert epp[f"Certificate/{issuer['ca']['secretName']}"]["spec"]["isCA"] is True
    assert volume["secret"]["defaultMode"] & 0o440 == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    assert "grpc" not in container["readinessProbe"]  # the kubelet's gRPC probe has no TLS


def test_rbac_lets_the_picker_read_exactly_what_it_watches(epp: Objects) -> None:
    pod = epp["Deployment/sluicegate-epp"]["spec"]["template"]["spec"]
    binding = epp["RoleBinding/sluicegate-epp"]
    (subject,) = binding["subjects"]
    assert (subject["kind"], subject["name"]) == ("ServiceAccount", pod["serviceAccountName"])
    assert subject["namespace"] == epp["InferencePool/vllm-llama"]["metadata"]["namespace"]
    role = epp[f"Role/{binding['roleRef']['name']}"]
    granted = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert granted == {
        ("inference.networking.k8s.io", "inferencepools"): {"get", "list", "watch"},
        ("", "pods"): {"get", "list", "watch"},
    }


def test_the_route_sends_to_the_pool_through_the_envoy_gateway(
    epp: Objects, gateway: Objects
) -> None:
    route = gateway["HTTPRoute/vllm-llama"]
    (rule,) = route["spec"]["rules"]
    (backend,) = rule["backendRefs"]
    assert (backend["group"], backend["kind"]) == ("inference.networking.k8s.io", "InferencePool")
    pool = epp[f"InferencePool/{backend['name']}"]
    assert route["metadata"]["namespace"] == pool["metadata"]["namespace"]
    (parent,) = route["spec"]["parentRefs"]
    gw = gateway[f"Gateway/{parent['name']}"]
    cls = gateway[f"GatewayClass/{gw['spec']['gatewayClassName']}"]
    assert cls["spec"]["controllerName"] == "gateway.envoyproxy.io/gatewayclass-controller"


def test_envoy_gateway_is_told_to_take_inferencepools_as_backends() -> None:
    values = yaml.safe_load((EPP / "envoy-gateway" / "envoy-gateway-values.yaml").read_text())
    (resource,) = values["config"]["envoyGateway"]["extensionManager"]["backendResources"]
    key = f"{resource['group']}/{resource['version']}/{resource['kind']}"
    assert key in crd_schemas()  # the very kind and version the pool manifest is checked as
