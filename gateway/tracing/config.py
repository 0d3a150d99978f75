"""The ``tracing:`` section: OpenTelemetry traces of each request (docs/observability.md).

Off by default. On, it needs the ``tracing`` extra (the OpenTelemetry SDK and its OTLP/HTTP
exporter); the section says so, located, when the extra is missing. Where the section is
silent, the standard ``OTEL_*`` variables have their say (the endpoint, the service name,
the sampling ratio, the batch processor's limits).

A reload applies ``sample_ratio`` at once (as Envoy's runtime sampling key does); turning
tracing on or off, the service name and the endpoint apply at the next restart, as the
backends do (``config/in_force.py``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from pydantic import BaseModel, ConfigDict, Field, model_validator

EXTRA_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
"""What ``pip install 'sluicegate[tracing]'`` brings."""

HOT_FIELDS = frozenset({"sample_ratio"})
"""The settings of the section a reload applies at once."""


class TracingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    sample_ratio: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="share of the calls started here that are traced (a call that comes "
        "with a traceparent follows its caller's choice); absent: OTEL_TRACES_SAMPLER_ARG, "
        "else 1.0",
    )
    service_name: str | None = Field(
        default=None, min_length=1, description="absent: OTEL_SERVICE_NAME, else sluicegate"
    )
    endpoint: str | None = Field(
        default=None,
        pattern=r"^https?://[^/\s]+(/\S*)?$",
        description="the OTLP/HTTP traces URL (…/v1/traces); absent: "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, "
        "else http://localhost:4318/v1/traces",
    )

    @model_validator(mode="after")
    def _installed(self) -> TracingConfig:
        missing = missing_modules() if self.enabled else []
        if missing:
            raise ValueError(
                "tracing is enabled but the OpenTelemetry SDK is not installed "
                f"({', '.join(missing)} missing): pip install 'sluicegate[tracing]'"
            )
        overwritten = overwritten_protos() if self.enabled else None
        if overwritten:
            raise ValueError(overwritten)
        return self


def missing_modules() -> list[str]:
    """The modules of the ``tracing`` extra that cannot be imported here."""
    return [name for name in EXTRA_MODULES if not _importable(name)]


def overwritten_protos() -> str | None:
    """What is wrong when the OTLP exporter's generated protobuf modules are an older copy,
    else None. ``xds-protos`` (the ``epp`` extra's Envoy stubs) ships its own
    ``opentelemetry/proto`` files, and whichever package pip installs last owns them: with
    the older copy the exporter cannot even be imported."""
    try:
        from opentelemetry.proto.common.v1 import common_pb2
    except ImportError as exc:
        return f"tracing is enabled but OpenTelemetry's protos do not import ({exc})"
    if hasattr(common_pb2, "InstrumentationScope"):
        return None
    version = _version("opentelemetry-proto")
    return (
        "tracing is enabled but the opentelemetry-proto modules were overwritten by an older "
        "copy (xds-protos, of the epp extra, ships one): reinstall them last: pip install "
        f"--force-reinstall --no-deps opentelemetry-proto{'==' + version if version else ''}"
    )


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
