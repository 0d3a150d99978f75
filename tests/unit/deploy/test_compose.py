"""deploy/compose/: both stacks valid Compose files once ``.env`` is substituted, vLLM run the
way vLLM's ROCm guide runs it, every service's config rendered and checked by its own tool
(``sluicegate check-config``, ``promtool check config``), and the values vLLM and the gateway
must share taken from ``.env`` on both sides."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from emulator.profile import load_profile
from scripts.child_process import passing
from scripts.service_argv import sluicegate
from tests.unit.deploy.compose import (
    compose_schema,
    flag_values,
    interpolate,
    read_env_file,
    variables,
)
from tests.unit.deploy.conftest import DEPLOY, REPO

COMPOSE = DEPLOY / "compose"
STACKS = {"rocm": COMPOSE / "compose.rocm.yaml", "cpu": COMPOSE / "compose.cpu.yaml"}
SERVERS = ("vllm-0", "vllm-1")


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return read_env_file(COMPOSE / ".env")


def _load(stack: str, env: dict[str, str]) -> dict[str, Any]:
    rendered: dict[str, Any] = interpolate(yaml.safe_load(STACKS[stack].read_text()), env)
    return rendered


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_config", COMPOSE / "render_config.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gateway_config(stack: dict[str, Any], env: dict[str, str], out: Path) -> Path:
    """The gateway's config as render_config.py writes it in the container: the template
    with the container's environment (env_file, then `environment:` over it)."""
    service = stack["services"]["sluicegate"]
    container_env = dict(env)
    for env_file in service["env_file"]:
        container_env.update(read_env_file(COMPOSE / env_file))
    container_env.update(service.get("environment", {}))
    template = (COMPOSE / "sluicegate.yaml.tmpl").read_text()
    out.write_text(_render_module().render(template, container_env))
    return out


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_stack_is_a_valid_compose_file(stack: str, env: dict[str, str]) -> None:
    jsonschema.Draft7Validator(compose_schema()).validate(_load(stack, env))


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_variable_comes_from_the_env_file_or_has_a_default(
    stack: str, env: dict[str, str]
) -> None:
    raw = yaml.safe_load(STACKS[stack].read_text())
    _load(stack, env)  # raises on an unset variable without a default
    assert {"SERVED_MODEL_NAME"} <= variables(raw)


def test_the_schema_check_can_fail(env: dict[str, str]) -> None:
    broken = _load("rocm", env)
    broken["services"]["vllm-0"]["ipc"] = ["host"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(compose_schema()).validate(broken)


def test_vllm_runs_as_its_rocm_guide_says(env: dict[str, str]) -> None:
    services = _load("rocm", env)["services"]
    devices = set()
    for name in SERVERS:
        vllm = services[name]
        assert vllm["image"].startswith("vllm/vllm-openai-rocm:")
        assert {"/dev/kfd", "/dev/dri"} <= set(vllm["devices"])
        assert vllm["group_add"] == ["video"] and vllm["ipc"] == "host"
        assert "seccomp=unconfined" in vllm["security_opt"] and "SYS_PTRACE" in vllm["cap_add"]
        assert any(v.endswith(":/root/.cache/huggingface") for v in vllm["volumes"])
        devices.add(vllm["environment"]["HIP_VISIBLE_DEVICES"])
    assert len(devices) == len(SERVERS), "one GPU per server"


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_gateway_config_renders_and_passes_check_config(
    stack: str, env: dict[str, str], tmp_path: Path
) -> None:
    path = _gateway_config(_load(stack, env), env, tmp_path / "config.yaml")
    passing(sluicegate("check-config", str(path)), cwd=REPO)


def test_vllm_and_the_gateway_share_the_env_files_values(
    env: dict[str, str], tmp_path: Path
) -> None:
    stack = _load("rocm", env)
    config = yaml.safe_load(_gateway_config(stack, env, tmp_path / "c.yaml").read_text())
    backends = {b["url"]: b for b in config["backends"]}
    for name in SERVERS:
        args = flag_values(stack["services"][name]["command"])
        backend = backends[f"http://{name}:{args['port']}"]
        assert backend["max_num_seqs"] == int(args["max-num-seqs"]) == int(env["MAX_NUM_SEQS"])
        assert backend["models"] == [args["served-model-name"]] == [env["SERVED_MODEL_NAME"]]
        assert args["max-model-len"] == env["MAX_MODEL_LEN"] and args["model"] == env["MODEL"]


def test_the_cpu_twin_gives_the_gateway_the_emulators_slots(
    env: dict[str, str], tmp_path: Path
) -> None:
    stack = _load("cpu", env)
    config = yaml.safe_load(_gateway_config(stack, env, tmp_path / "c.yaml").read_text())
    for name in SERVERS:
        args = flag_values(stack["services"][name]["command"])
        slots = load_profile(args["profile"]).engine.max_num_seqs
        backend = next(b for b in config["backends"] if b["url"] == f"http://{name}:8000")
        assert args["profile"] == "rx9070xt" and args["port"] == "8000"
        assert backend["max_num_seqs"] == slots
        assert backend["models"] == [args["model-name"]] == [env["SERVED_MODEL_NAME"]]


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_mounted_file_exists(stack: str, env: dict[str, str]) -> None:
    for service in _load(stack, env)["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                is_cache = source == env["MODEL_CACHE"]
                assert is_cache or (COMPOSE / source).exists(), source


def test_grafana_is_provisioned_with_the_prometheus_service_and_the_dashboard(
    env: dict[str, str],
) -> None:
    services = _load("rocm", env)["services"]
    provisioning = COMPOSE / "grafana" / "provisioning"
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())
    (datasource,) = source["datasources"]
    assert datasource["url"] == "http://prometheus:9090" and datasource["isDefault"]
    assert "prometheus" in services
    provider = yaml.safe_load((provisioning / "dashboards" / "sluicegate.yaml").read_text())
    path = provider["providers"][0]["options"]["path"]
    mounts = dict(v.rsplit(":", 2)[:2] for v in services["grafana"]["volumes"])
    assert mounts["../grafana/sluicegate.json"] == f"{path}/sluicegate.json"


def test_the_compose_prometheus_jobs_are_the_shipped_ones_with_compose_targets() -> None:
    compose = yaml.safe_load((COMPOSE / "prometheus.yml").read_text())
    shipped = yaml.safe_load((DEPLOY / "prometheus" / "scrape.yaml").read_text())

    def without_targets(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**j, "static_configs": [{**s, "targets": []} for s in j["static_configs"]]}
            for j in jobs
        ]

    assert without_targets(compose["scrape_configs"]) == without_targets(shipped["scrape_configs"])
    targets = {
        t for j in compose["scrape_configs"] for s in j["static_configs"] for t in s["targets"]
    }
    assert targets == {"sluicegate:8080", "vllm-0:8000", "vllm-1:8000"}


@pytest.mark.prometheus
def test_promtool_accepts_the_compose_prometheus_config(tmp_path: Path) -> None:
    """As mounted in the container: prometheus.yml with alerts.yaml beside it."""
    shutil.copy(COMPOSE / "prometheus.yml", tmp_path / "prometheus.yml")
    shutil.copy(DEPLOY / "prometheus" / "alerts.yaml", tmp_path / "alerts.yaml")
    done = passing(["promtool", "check", "config", str(tmp_path / "prometheus.yml")])
    assert "1 rules found" not in done.stdout and "SUCCESS" in done.stdout
