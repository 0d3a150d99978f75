"""The names the Endpoint Picker protocol defines, and reading them from ext_proc messages.

Sources: gateway-api-inference-extension ``docs/proposals/004-endpoint-picker-protocol``
and ``pkg/lwepp/metadata/consts.go``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DESTINATION = "x-gateway-destination-endpoint"
"""Request header and ``envoy.lb`` dynamic-metadata key: ``ip:port[,ip:port...]``."""
DESTINATION_NAMESPACE = "envoy.lb"
SERVED = "x-gateway-destination-endpoint-served"
"""``metadata_context["envoy.lb"]`` key on the response: where the request really went."""
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET = "x-gateway-destination-endpoint-subset"
FAIRNESS_ID = "x-gateway-inference-fairness-id"
OBJECTIVE = "x-gateway-inference-objective"
MODEL_REWRITE = "x-gateway-model-name-rewrite"
UPSTREAM_ADDRESS = "upstream.address"
"""Envoy's attribute naming the upstream host, asked for by ``response_attributes`` where
no gateway writes ``SERVED`` (standalone Envoy)."""
RESPONSE_CODE = "response.code"
"""Envoy's attribute with the response status, asked for by ``response_attributes`` where
the response headers are not sent to the picker (``response_header_mode: SKIP``)."""


def header_dict(header_map: Any) -> dict[str, str]:
    """An ext_proc ``HeaderMap`` as {lowercase name: value}; the first of repeats wins, as
    the HTTP front reads headers. Envoy sends ``raw_value`` (bytes) or ``value``."""
    out: dict[str, str] = {}
    for h in header_map.headers:
        key = str(h.key).lower()
        if key not in out:
            raw = h.raw_value
            out[key] = raw.decode("latin-1") if raw else str(h.value)
    return out


def _struct_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {k: _struct_value(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_struct_value(v) for v in value.list_value.values]
    return getattr(value, kind) if kind is not None else None


def filter_metadata(message: Any) -> dict[str, dict[str, Any]]:
    """``metadata_context.filter_metadata`` of a ``ProcessingRequest`` as plain values."""
    if not message.HasField("metadata_context"):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for namespace, struct in message.metadata_context.filter_metadata.items():
        out[namespace] = {k: _struct_value(v) for k, v in struct.fields.items()}
    return out


def subset_hint(metadata: Mapping[str, Mapping[str, Any]]) -> frozenset[str] | None:
    """The endpoints the gateway allows (``ip:port``), or None when it sets no subset. A
    string (``a,b``) and a list of strings are both read, as the reference picker does."""
    namespace = metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET not in namespace:
        return None
    value = namespace[SUBSET]
    items = value if isinstance(value, list) else [value]
    return frozenset(
        part.strip()
        for item in items
        if isinstance(item, str)
        for part in item.split(",")
        if part.strip()
    )


def served_endpoint(message: Any) -> str | None:
    """Where Envoy sent the request: ``envoy.lb`` metadata, else the ``upstream.address``
    attribute."""
    served = filter_metadata(message).get(DESTINATION_NAMESPACE, {}).get(SERVED)
    if isinstance(served, str) and served:
        return served
    for struct in message.attributes.values():
        value = struct.fields.get(UPSTREAM_ADDRESS)
        if value is not None and value.WhichOneof("kind") == "string_value":
            return str(value.string_value)
    return None


def response_code(message: Any) -> int | None:
    """The ``response.code`` attribute (Envoy sends attributes with a direction's first
    message: the first response body piece when the headers are skipped)."""
    for struct in message.attributes.values():
        value = struct.fields.get(RESPONSE_CODE)
        if value is not None and value.WhichOneof("kind") == "number_value":
            return int(value.number_value)
    return None
