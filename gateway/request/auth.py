"""API keys to tenants. Only sha256 digests are kept; comparison is constant-time.

``authenticate`` is the pipeline's first step: the caller's tenant, or the 401."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.config.schema import GatewayConfig, TenantConfig
from gateway.request.errors import ApiError


def key_digest(api_key: str) -> str:
    """The hex sha256 of an API key, as written in the config's ``api_key_sha256``."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Tenant:
    """What the gateway knows about the caller after authentication."""

    name: str
    weight: float
    priority: int
    workload_classes: frozenset[str]
    default_class: str
    default_deadline_s: float | None


class Authenticator:
    """Resolves ``Authorization: Bearer KEY`` to a ``Tenant`` or None (401). Only a request
    without the header is anonymous; a malformed one (another scheme, an empty token) is
    refused like a wrong key, so a misconfigured client learns it at once."""

    def __init__(self, config: GatewayConfig) -> None:
        all_classes = frozenset(config.workload_classes)
        default = config.default_workload_class
        self._by_digest: list[tuple[bytes, Tenant]] = []
        tenants = {t.name: _tenant(t, all_classes, default) for t in config.tenants}
        for cfg in config.tenants:
            for digest in cfg.api_key_sha256:
                self._by_digest.append((bytes.fromhex(digest), tenants[cfg.name]))
        anon = config.auth.anonymous_tenant
        self._anonymous = tenants[anon] if anon is not None else None
        self._by_name = tenants

    def named(self, name: str) -> Tenant | None:
        """The tenant called ``name``, for a front that trusts an identity established
        before it (the Endpoint Picker behind an authenticating gateway)."""
        return self._by_name.get(name)

    def authenticate(self, authorization: str | None) -> Tenant | None:
        if authorization is None:
            return self._anonymous
        key = _bearer(authorization)
        if key is None:
            return None
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        found: Tenant | None = None
        # Compare against every digest so the time taken does not depend on which matched.
        for candidate, tenant in self._by_digest:
            if hmac.compare_digest(candidate, digest):
                found = tenant
        return found


def authenticate(auth: Authenticator, hdrs: Mapping[str, str]) -> Tenant:
    """The caller's tenant from its API key; 401 without a valid one."""
    tenant = auth.authenticate(hdrs.get("authorization"))
    if tenant is None:
        raise ApiError(
            401,
            "missing or unknown API key",
            type_="authentication_error",
            code="invalid_api_key",
            reason="unauthenticated",
        )
    return tenant


def tenant_named(auth: Authenticator, name: str, header: str) -> Tenant:
    """The tenant an identity established before the gateway names (in ``header``); 401
    for a name the config does not know."""
    tenant = auth.named(name)
    if tenant is None:
        raise ApiError(
            401,
            f"unknown tenant {name!r} in {header}",
            type_="authentication_error",
            code="unknown_tenant",
            reason="unauthenticated",
        )
    return tenant


def _bearer(authorization: str) -> str | None:
    """The token of ``Bearer TOKEN``; None for any other scheme or an empty token."""
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value:
        return None
    return value


def _tenant(cfg: TenantConfig, all_classes: frozenset[str], default: str) -> Tenant:
    classes = frozenset(cfg.workload_classes) if cfg.workload_classes else all_classes
    default_class = cfg.default_class or (default if default in classes else min(classes))
    deadline = None if cfg.default_deadline_ms is None else cfg.default_deadline_ms / 1000.0
    return Tenant(cfg.name, cfg.weight, cfg.priority, classes, default_class, deadline)
