"""``deploy/envoy/envoy.yaml`` as shipped, and as the tier renders it, is a config the real
Envoy accepts (``envoy --mode validate``), and it wires what the protocol needs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.envoy.stack import ENVOY_CONFIG, render_envoy, validate_envoy
from tests.unit.epp.certs import SERVER_NAME, TestCa

pytestmark = pytest.mark.envoy


def test_the_shipped_config_validates() -> None:
    done = validate_envoy(ENVOY_CONFIG)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.parametrize("mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
@pytest.mark.parametrize("response", [None, "FULL_DUPLEX_STREAMED", "BUFFERED"])
def test_the_rendered_configs_validate(tmp_path: Path, mode: str, response: str | None) -> None:
    path = tmp_path / "envoy.yaml"
    config = render_envoy(
        18081,
        19000,
        19002,
        failure_mode_allow=True,
        request_body_mode=mode,
        response_body_mode=response,
    )
    path.write_text(yaml.safe_dump(config))
    done = validate_envoy(path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mutual-tls"])
def test_the_picker_cluster_over_tls_validates(tmp_path: Path, mutual: bool) -> None:
    ca = TestCa()
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    tls = {"ca_file": str(tmp_path / "ca.crt"), "server_name": SERVER_NAME}
    if mutual:
        ca.issue("envoy", client=True).write(tmp_path / "envoy.crt", tmp_path / "envoy.key")
        tls.update(cert_file=str(tmp_path / "envoy.crt"), key_file=str(tmp_path / "envoy.key"))
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(render_envoy(18081, 19000, 19002, picker_tls=tls)))
    done = validate_envoy(path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_envoy_alone_as_the_benchmark_renders_it_validates(tmp_path: Path) -> None:
    path = tmp_path / "envoy.yaml"
    path.write_text(yaml.safe_dump(render_envoy(18081, 19000, None, backend=18001)))
    done = validate_envoy(path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_original_dst_cluster_reads_the_pickers_header() -> None:
    config = yaml.safe_load(ENVOY_CONFIG.read_text())
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    route = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    target = route["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    cluster = clusters[target["cluster"]]
    assert cluster["type"] == "ORIGINAL_DST" and cluster["lb_policy"] == "CLUSTER_PROVIDED"
    assert cluster["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-gateway-destination-endpoint",
    }
    health = clusters["sluicegate_epp"]["health_checks"][0]["grpc_health_check"]
    assert health["service_name"] == "envoy.service.ext_proc.v3.ExternalProcessor"
