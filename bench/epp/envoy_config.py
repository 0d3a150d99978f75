"""``deploy/envoy/envoy.yaml`` rendered for a run on loopback: its ports, the ext_proc
settings a run varies, or (no picker) Envoy alone with a static cluster to one backend.
The real-Envoy tier (tests/envoy) and the EPP benchmark both start Envoy from it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ENVOY_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "envoy" / "envoy.yaml"


def render_envoy(
    listen: int,
    admin: int,
    epp: int | None,
    *,
    backend: int | None = None,
    failure_mode_allow: bool = False,
    request_body_mode: str = "FULL_DUPLEX_STREAMED",
    response_body_mode: str | None = None,
    response_header_mode: str | None = None,
    picker_tls: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The shipped config, listening on 127.0.0.1:``listen``, admin on ``admin``, the
    picker at 127.0.0.1:``epp``; with ``epp`` None, no ext_proc filter and every request
    goes to the backend at 127.0.0.1:``backend``. ``response_header_mode`` SKIP also asks
    for ``response.code`` with the ``upstream.address`` attribute (Envoy sends attributes
    with a direction's first message, here the response body)."""
    config: dict[str, Any] = yaml.safe_load(ENVOY_CONFIG.read_text())
    config["admin"]["address"]["socket_address"]["port_value"] = admin
    resources = config["static_resources"]
    listener = resources["listeners"][0]
    listener["address"]["socket_address"].update(address="127.0.0.1", port_value=listen)
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    if epp is None:
        assert backend is not None, "Envoy alone needs the backend's port"
        hcm["http_filters"] = hcm["http_filters"][1:]  # the router only
        route = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
        route["cluster"] = "backend"
        resources["clusters"] = [_static("backend", backend, http2=False)]
        return config
    ext_proc = hcm["http_filters"][0]["typed_config"]
    ext_proc["failure_mode_allow"] = failure_mode_allow
    mode = ext_proc["processing_mode"]
    mode["request_body_mode"] = request_body_mode
    if response_header_mode is not None:
        mode["response_header_mode"] = response_header_mode
        if response_header_mode == "SKIP":
            ext_proc["response_attributes"] = ["response.code", "upstream.address"]
    if response_body_mode is not None:
        mode["response_body_mode"] = response_body_mode
        if response_body_mode == "FULL_DUPLEX_STREAMED":  # Envoy requires it
            mode["response_trailer_mode"] = "SEND"
    picker = next(c for c in resources["clusters"] if c["name"] == "sluicegate_epp")
    endpoint = picker["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    endpoint["address"]["socket_address"]["port_value"] = epp
    if picker_tls is not None:
        picker["transport_socket"] = upstream_tls(**picker_tls)
    return config


def upstream_tls(
    ca_file: str, server_name: str, cert_file: str | None = None, key_file: str | None = None
) -> dict[str, Any]:
    """The picker cluster's transport socket: TLS to the picker, its certificate checked
    against ``ca_file`` and ``server_name``; with ``cert_file``/``key_file``, Envoy's
    client certificate (the picker's ``epp.tls.client_ca_file`` then verifies it)."""
    common: dict[str, Any] = {
        "alpn_protocols": ["h2"],
        "validation_context": {
            "trusted_ca": {"filename": ca_file},
            "match_typed_subject_alt_names": [
                {"san_type": "DNS", "matcher": {"exact": server_name}}
            ],
        },
    }
    if cert_file is not None and key_file is not None:
        common["tls_certificates"] = [
            {"certificate_chain": {"filename": cert_file}, "private_key": {"filename": key_file}}
        ]
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3."
            "UpstreamTlsContext",
            "sni": server_name,
            "common_tls_context": common,
        },
    }


def _static(name: str, port: int, *, http2: bool) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "circuit_breakers": {
            "thresholds": [
                {"max_connections": 40000, "max_pending_requests": 40000, "max_requests": 40000}
            ]
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {"address": "127.0.0.1", "port_value": port}
                                }
                            }
                        }
                    ]
                }
            ],
        },
    }
    return cluster
