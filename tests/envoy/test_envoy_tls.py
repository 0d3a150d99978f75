"""A real Envoy reaching ``sluicegate epp`` over TLS (as Envoy AI Gateway's picker cluster
does): its UpstreamTlsContext trusts a test CA, the picker serves ``epp.tls``; with mutual
TLS Envoy presents a client certificate the picker verifies. A request goes through; a
cleartext client (gRPC, and an Envoy without TLS) is refused on the same port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import openai
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.envoy.conftest import StackFactory
from tests.envoy.stack import picker_healthy, running_envoy
from tests.envoy.test_envoy_sdk import MESSAGES, PIN, eventually
from tests.integration.harness import MODEL, api_key
from tests.unit.epp.certs import SERVER_NAME, TestCa

pytestmark = pytest.mark.envoy


def _pki(tmp_path: Path, *, mutual: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the picker's epp.tls, the picker cluster's TLS settings for render_envoy)."""
    ca = TestCa()
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    ca.issue("sluicegate-epp").write(tmp_path / "tls.crt", tmp_path / "tls.key")
    picker: dict[str, Any] = {
        "cert_file": str(tmp_path / "tls.crt"),
        "key_file": str(tmp_path / "tls.key"),
    }
    envoy: dict[str, Any] = {"ca_file": str(tmp_path / "ca.crt"), "server_name": SERVER_NAME}
    if mutual:
        picker["client_ca_file"] = str(tmp_path / "ca.crt")
        ca.issue("envoy", client=True).write(tmp_path / "envoy.crt", tmp_path / "envoy.key")
        envoy.update(cert_file=str(tmp_path / "envoy.crt"), key_file=str(tmp_path / "envoy.key"))
    return picker, envoy


def _cleartext_health(port: int) -> grpc.RpcError | None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="liveness"), timeout=5
            )
        except grpc.RpcError as exc:
            return exc
    return None


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mutual-tls"])
def test_envoy_reaches_the_picker_over_tls_and_cleartext_is_refused(
    stack: StackFactory, tmp_path: Path, mutual: bool
) -> None:
    picker, envoy_tls = _pki(tmp_path, mutual=mutual)
    s = stack(envoy={"picker_tls": envoy_tls}, epp={"tls": picker})
    eventually(lambda: picker_healthy(s.envoy), "Envoy's gRPC health check passes over TLS")
    raw = s.sdk().chat.completions.with_raw_response.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, extra_body=PIN
    )
    assert raw.headers["x-sluicegate-decision"] == "admit"
    assert raw.parse().usage is not None
    eventually(lambda: sum(s.epp.outcomes().values()) == 1, "the request's terminal outcome")
    refused = _cleartext_health(s.epp.grpc_port)
    assert refused is not None and refused.code() is grpc.StatusCode.UNAVAILABLE
    with running_envoy(s.epp.grpc_port, tmp_path) as cleartext:  # the TLS settings left out
        client = openai.OpenAI(
            base_url=f"{cleartext.url}/v1", api_key=api_key("alice"), max_retries=0, timeout=30.0
        )
        with pytest.raises(openai.InternalServerError):  # fail closed: no decision, no pod
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3)
        assert not picker_healthy(cleartext)
    assert sum(s.epp.outcomes().values()) == 1  # only the TLS request reached the picker
