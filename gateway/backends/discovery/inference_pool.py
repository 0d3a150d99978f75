"""An ``InferencePool`` (``inference.networking.k8s.io/v1``) and its pods, as the API server
returns them (plain JSON), to the backends they make. Pure: no I/O, no client library.

Field names follow gateway-api-inference-extension ``api/v1/inferencepool_types.go``:
``spec.selector.matchLabels``, ``spec.targetPorts[].number`` (each port of each pod is an
endpoint ``podIP:port``), ``spec.endpointPickerRef``. A pod serves when its ``Ready``
condition is ``True``, it has a ``status.podIP`` and it is not being deleted (what the
reference picker's pod reconciler does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.schema import BackendConfig, KubernetesDiscoveryConfig

Json = Mapping[str, Any]


class PoolSpecError(ValueError):
    """An InferencePool whose spec cannot be used (no selector or no target port)."""


@dataclass(frozen=True, slots=True)
class PoolSpec:
    selector: tuple[tuple[str, str], ...]
    """``matchLabels`` as sorted pairs."""
    ports: tuple[int, ...]
    endpoint_picker: str | None = None
    """The ``endpointPickerRef`` service as ``name:port`` (for the log), if set."""

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.selector)

    @property
    def label_selector(self) -> str:
        """The ``labelSelector`` query value: ``k=v,k2=v2``."""
        return ",".join(f"{k}={v}" for k, v in self.selector)


def pool_spec(pool: Json) -> PoolSpec:
    """The parts of an InferencePool object discovery uses; ``PoolSpecError`` if unusable."""
    spec = pool.get("spec") or {}
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    if not labels or not all(isinstance(v, str) for v in labels.values()):
        raise PoolSpecError("spec.selector.matchLabels must name at least one label")
    numbers = [p.get("number") for p in spec.get("targetPorts") or [] if isinstance(p, Mapping)]
    ports = [n for n in numbers if isinstance(n, int) and 0 < n < 65536]
    if not ports or len(ports) != len(numbers):
        raise PoolSpecError("spec.targetPorts must list port numbers (1-65535)")
    ref = spec.get("endpointPickerRef") or {}
    picker = None
    if ref.get("name"):
        port = (ref.get("port") or {}).get("number")
        picker = f"{ref['name']}:{port}" if port else str(ref["name"])
    return PoolSpec(tuple(sorted(labels.items())), tuple(dict.fromkeys(ports)), picker)


def serving_address(pod: Json, labels: Mapping[str, str]) -> str | None:
    """The pod's IP if it matches ``labels`` and serves now (Ready, not being deleted)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return None
    pod_labels = meta.get("labels") or {}
    if any(pod_labels.get(k) != v for k, v in labels.items()):
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    ip = status.get("podIP")
    return ip if ready and isinstance(ip, str) and ip else None


def backends(
    spec: PoolSpec, pods: Iterable[Json], settings: KubernetesDiscoveryConfig
) -> list[BackendConfig]:
    """One backend per serving pod and target port, sorted by name: the pod's name (with
    ``:port`` when the pool has several ports) at ``http://podIP:port``."""
    labels, out = spec.labels, []
    for pod in pods:
        ip, name = serving_address(pod, labels), (pod.get("metadata") or {}).get("name")
        if ip is None or not name:
            continue
        host = f"[{ip}]" if ":" in ip else ip
        for port in spec.ports:
            out.append(
                BackendConfig(
                    name=name if len(spec.ports) == 1 else f"{name}:{port}",
                    url=f"http://{host}:{port}",
                    models=list(settings.models),
                    max_num_seqs=settings.max_num_seqs,
                    max_model_len=settings.max_model_len,
                )
            )
    return sorted(out, key=lambda b: b.name)
