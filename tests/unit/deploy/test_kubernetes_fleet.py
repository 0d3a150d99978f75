"""deploy/kubernetes/fleet/: every overlay rendered by ``kubectl kustomize`` (offline), every
rendered object valid against the Kubernetes schemas (kubernetes-validate ships them), the
gateway's config rendered the way its init container renders it and accepted by
``sluicegate check-config``, its backends the StatefulSet's pods, and the Prometheus Operator
monitors selecting what the fleet runs."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from emulator.profile import load_profile
from scripts.child_process import passing
from scripts.service_argv import sluicegate
from tests.unit.deploy.compose import flag_values
from tests.unit.deploy.conftest import DEPLOY, REPO

FLEET = DEPLOY / "kubernetes" / "fleet"
OVERLAYS = ("rocm", "cuda", "cpu")
SCHEMA_VERSIONS = ("1.30.0", "1.37.0")


@functools.cache
def _kustomize_text(path: Path) -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl (with its built-in kustomize) is needed"
    done = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def kustomize(path: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize PATH`` renders (fresh dicts on every call)."""
    return [doc for doc in yaml.safe_load_all(_kustomize_text(path)) if doc]


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, dict[str, dict[str, Any]]]:
    objects = kustomize(FLEET / "overlays" / request.param)
    by_key = {f"{o['kind']}/{o['metadata']['name'].split('-')[0]}": o for o in objects}
    assert len(by_key) == len(objects)
    return request.param, by_key


def _pod(objects: dict[str, dict[str, Any]], kind_name: str) -> dict[str, Any]:
    pod: dict[str, Any] = objects[kind_name]["spec"]["template"]["spec"]
    return pod


def _values(objects: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The fleet-values ConfigMap (its generated name carries a hash suffix)."""
    (found,) = [o for k, o in objects.items() if o["metadata"]["name"].startswith("fleet-values")]
    data: dict[str, str] = found["data"]
    return data


def _rendered_gateway_config(objects: dict[str, dict[str, Any]], tmp_path: Path) -> Path:
    """Run the init container's own command, with its two mount paths moved to tmp_path."""
    pod = _pod(objects, "Deployment/sluicegate")
    (init,) = pod["initContainers"]
    template_dir, config_dir = tmp_path / "template", tmp_path / "config"
    template_dir.mkdir()
    config_dir.mkdir()
    (template,) = [
        o for o in objects.values() if o["metadata"]["name"].startswith("gateway-config")
    ]
    for name, text in template["data"].items():
        (template_dir / name).write_text(text)
    code = init["command"][2].replace("/etc/sluicegate-template/", f"{template_dir}/")
    code = code.replace("/etc/sluicegate/", f"{config_dir}/")
    assert init["command"][:2] == ["python", "-c"]
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_values(objects),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return config_dir / "config.yaml"


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_every_rendered_object_is_valid_kubernetes(
    overlay: tuple[str, dict[str, dict[str, Any]]], version: str
) -> None:
    _, objects = overlay
    assert {"StatefulSet", "Deployment", "Service", "ConfigMap"} == {
        o["kind"] for o in objects.values()
    }
    for obj in objects.values():
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_schema_check_can_fail() -> None:
    objects = {o["kind"]: o for o in kustomize(FLEET / "overlays" / "rocm")}
    objects["StatefulSet"]["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(objects["StatefulSet"], SCHEMA_VERSIONS[-1], strict=True)


def test_the_gateway_config_passes_check_config(
    overlay: tuple[str, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    _, objects = overlay
    path = _rendered_gateway_config(objects, tmp_path)
    passing(sluicegate("check-config", str(path)), cwd=REPO)


def test_the_backends_are_the_statefulsets_pods_behind_the_headless_service(
    overlay: tuple[str, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    _, objects = overlay
    sts, service = objects["StatefulSet/vllm"], objects["Service/vllm"]
    assert service["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == "vllm"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    config = yaml.safe_load(_rendered_gateway_config(objects, tmp_path).read_text())
    urls = [b["url"] for b in config["backends"]]
    pods = [f"http://vllm-{i}.vllm:{port['port']}" for i in range(sts["spec"]["replicas"])]
    assert urls == pods


def test_vllm_and_the_gateway_take_the_shared_values_from_one_configmap(
    overlay: tuple[str, dict[str, dict[str, Any]]], tmp_path: Path
) -> None:
    name, objects = overlay
    values = _values(objects)
    config = yaml.safe_load(_rendered_gateway_config(objects, tmp_path).read_text())
    (server,) = _pod(objects, "StatefulSet/vllm")["containers"]
    refs = [e["configMapRef"]["name"] for e in server["envFrom"]]
    assert any(r.startswith("fleet-values") for r in refs)
    args = flag_values(server["args"])
    for backend in config["backends"]:
        assert backend["max_num_seqs"] == int(values["MAX_NUM_SEQS"])
        assert backend["models"] == [values["SERVED_MODEL_NAME"]]
    if name == "cpu":
        assert args["model-name"] == "$(SERVED_MODEL_NAME)"
        assert int(values["MAX_NUM_SEQS"]) == load_profile(args["profile"]).engine.max_num_seqs
    else:
        assert args["max-num-seqs"] == "$(MAX_NUM_SEQS)"
        assert args["served-model-name"] == "$(SERVED_MODEL_NAME)"
        assert args["max-model-len"] == "$(MAX_MODEL_LEN)" and args["model"] == "$(MODEL)"


def test_each_accelerator_gets_its_image_device_and_options(
    overlay: tuple[str, dict[str, dict[str, Any]]],
) -> None:
    name, objects = overlay
    (server,) = _pod(objects, "StatefulSet/vllm")["containers"]
    limits = server.get("resources", {}).get("limits", {})
    if name == "rocm":
        assert server["image"].startswith("vllm/vllm-openai-rocm:")
        assert limits["amd.com/gpu"] == 1 and "nvidia.com/gpu" not in limits
        assert "SYS_PTRACE" in server["securityContext"]["capabilities"]["add"]
        assert server["securityContext"]["seccompProfile"]["type"] == "Unconfined"
    elif name == "cuda":
        assert server["image"].startswith("vllm/vllm-openai:")
        assert limits["nvidia.com/gpu"] == 1 and "amd.com/gpu" not in limits
    else:
        assert server["command"] == ["sluicegate", "emulate"]
        assert not {"amd.com/gpu", "nvidia.com/gpu"} & set(limits)
    if name != "cpu":
        mounts = {m["mountPath"] for m in server["volumeMounts"]}
        assert {"/root/.cache/huggingface", "/dev/shm"} <= mounts
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"]["path"] == "/health", probe


def test_the_monitors_select_the_gateway_service_and_the_vllm_pods() -> None:
    monitors = {o["kind"]: o for o in kustomize(FLEET / "monitoring")}
    objects = {
        f"{o['kind']}/{o['metadata']['name']}": o for o in kustomize(FLEET / "overlays" / "rocm")
    }
    service = objects["Service/sluicegate"]
    smon = monitors["ServiceMonitor"]
    assert smon["apiVersion"] == monitors["PodMonitor"]["apiVersion"] == "monitoring.coreos.com/v1"
    assert smon["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["name"] == "sluicegate"  # the Operator's job label: alerts' job
    assert {e["port"] for e in smon["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    pmon = monitors["PodMonitor"]
    template = objects["StatefulSet/vllm"]["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert pmon["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels[pmon["spec"]["jobLabel"]] == "vllm"
    ports = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert {e["port"] for e in pmon["spec"]["podMetricsEndpoints"]} <= ports


def test_the_plain_scrape_config_has_the_shipped_jobs() -> None:
    plain = yaml.safe_load((FLEET / "monitoring" / "prometheus-scrape.yaml").read_text())
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "scrape.yaml").read_text())
    assert [j["job_name"] for j in plain["scrape_configs"]] == [
        j["job_name"] for j in shipped["scrape_configs"]
    ]


@pytest.mark.prometheus
def test_promtool_accepts_the_plain_scrape_config(tmp_path: Path) -> None:
    """Debian's Prometheus is built without Kubernetes discovery (promtool rejects
    ``kubernetes_sd_configs``), so the discovery block is swapped for a static target and
    the rest (relabelling, intervals, paths) is checked."""
    config = yaml.safe_load((FLEET / "monitoring" / "prometheus-scrape.yaml").read_text())
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
        job["static_configs"] = [{"targets": ["127.0.0.1:8080"]}]
    config["rule_files"] = ["alerts.yaml"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    shutil.copy(DEPLOY / "prometheus" / "alerts.yaml", tmp_path / "alerts.yaml")
    passing(["promtool", "check", "config", str(tmp_path / "prometheus.yml")])
