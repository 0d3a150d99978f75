"""Backends as the Endpoint Picker protocol names them: ``ip:port``.

A backend's endpoint is the host and port of its configured ``url``; the subset hint and
the served endpoint are read back through the same map.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from gateway.config.schema import BackendConfig, host_port
from policies.backends import BackendsSnapshot


@lru_cache(maxsize=1024)
def endpoint_of(url: str) -> str:
    """``host:port`` of a backend URL (the scheme's port when none is written); remembered
    per URL, as every request maps the backends' URLs again (``Endpoints.of``)."""
    host, port = host_port(url)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Endpoints:
    by_name: dict[str, str]
    by_endpoint: dict[str, str]

    @classmethod
    def of(cls, backends: Iterable[BackendConfig]) -> Endpoints:
        by_name = {b.name: endpoint_of(b.url) for b in backends}
        return cls(by_name, {e: n for n, e in by_name.items()})

    def outside(self, allowed: frozenset[str]) -> frozenset[str]:
        """Backend names whose endpoint the subset ``allowed`` leaves out."""
        return frozenset(n for n, e in self.by_name.items() if e not in allowed)

    def route(
        self,
        backend: str,
        model: str,
        fleet: BackendsSnapshot,
        fallbacks: int,
        avoid: frozenset[str] = frozenset(),
    ) -> str:
        """The chosen backend's endpoint, then up to ``fallbacks`` other available ones
        serving ``model`` (fewest running first), as the header's ``ip:port,...`` list."""
        chosen = [self.by_name[backend]]
        if fallbacks:
            others = sorted(
                (
                    v
                    for v in fleet.backends
                    if v.available and v.serves(model) and v.name != backend and v.name not in avoid
                ),
                key=lambda v: v.running or 0.0,
            )
            chosen += [self.by_name[v.name] for v in others[:fallbacks] if v.name in self.by_name]
        return ",".join(chosen)
