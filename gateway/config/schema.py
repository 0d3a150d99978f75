"""The gateway's configuration: a pydantic model of the YAML file, loaded with line numbers.

Every error, including those the policy registry reports for the ``policy:`` section, is
turned into ``file:line: path: message`` so an operator can jump straight to it. The policy
version is a short hash of the validated settings (``config_version``), and the version is
what decisions carry; after a reload it is the hash of the settings in force
(``in_force.py``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from gateway.async_jobs.config import AsyncJobsConfig
from gateway.config.references import reference_problems
from gateway.config.yaml_lines import LineIndex, load_yaml_with_lines
from gateway.epp.tls_files import check_material
from gateway.tracing.config import TracingConfig
from policies.registry import error_message

Loc = tuple[str | int, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=1_048_576, gt=0, description="bigger bodies get 413")
    body_timeout_s: float = Field(default=30.0, gt=0, description="whole body by then, else 408")
    max_header_bytes: int = Field(default=32_768, gt=0, description="bigger header blocks: 431")
    header_timeout_s: float = Field(default=10.0, gt=0, description="whole head by then, else 408")
    lingering_time_s: float = Field(
        default=30.0, gt=0, description="drain a body answered early for at most this long"
    )
    lingering_timeout_s: float = Field(
        default=5.0, gt=0, description="stop draining after this long without a byte"
    )
    lingering_max_bytes: int = Field(
        default=16 * 2**20, ge=0, description="stop draining after this many bytes"
    )
    max_sequences_per_request: int = Field(
        default=128, ge=1, description="prompts x max(n, best_of) beyond this get 400"
    )
    connect_timeout_s: float = Field(default=3.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0, description="max silence from upstream")
    max_attempts: int = Field(default=3, ge=1, description="dispatches per request")
    tenant_label_limit: int = Field(default=20, ge=1, description="tenants named in metric labels")
    log_records: bool = True


def _hex_digest(digest: str) -> str:
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError("a key digest is the sha256 of the key: 64 lowercase hex characters")
    return digest


class TenantConfig(_Strict):
    name: str = Field(min_length=1)
    api_key_sha256: list[Annotated[str, AfterValidator(_hex_digest)]] = Field(default_factory=list)
    weight: float = Field(default=1.0, gt=0)
    priority: int = 0
    workload_classes: list[str] | None = None
    default_class: str | None = None
    default_deadline_ms: int | None = Field(default=None, gt=0)


class AuthConfig(_Strict):
    anonymous_tenant: str | None = None


class BackendConfig(_Strict):
    name: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://[^/\s]+(/\S*)?$")
    models: list[str] = Field(min_length=1)
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def host_port(url: str) -> tuple[str, int]:
    """The host and port of a backend URL (the scheme's port when none is written)."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or _DEFAULT_PORTS.get(parts.scheme, 80)


_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class KubernetesDiscoveryConfig(_Strict):
    """The backends are the ready pods of a Gateway API Inference Extension ``InferencePool``
    (``inference.networking.k8s.io/v1``): one backend per pod and target port, named after
    the pod (``pod:port`` when the pool has several ports), ``http://podIP:port``
    (``gateway/backends/discovery/``, docs/deployment-modes.md)."""

    inference_pool: str = Field(min_length=1, max_length=253, pattern=_DNS_SUBDOMAIN)
    namespace: str | None = Field(
        default=None,
        max_length=63,
        pattern=_DNS_LABEL,
        description="default: the namespace of the service account or kubeconfig context",
    )
    kubeconfig: str | None = Field(
        default=None, description="default: in-cluster, then $KUBECONFIG, then ~/.kube/config"
    )
    models: list[str] = Field(min_length=1, description="the models the pool's pods serve")
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)
    initial_sync_s: float = Field(
        default=10.0, ge=0, description="how long startup waits for the first list of pods"
    )
    resync_s: float = Field(
        default=300.0, gt=0, description="list afresh this often, even if every watch holds"
    )
    min_backoff_s: float = Field(default=0.5, gt=0, le=60)
    max_backoff_s: float = Field(default=30.0, gt=0, le=600)


class DiscoveryConfig(_Strict):
    """Where the backends come from when they are not listed under ``backends``."""

    kubernetes: KubernetesDiscoveryConfig


class HealthConfig(_Strict):
    interval_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=1.0, gt=0)
    failures_to_down: int = Field(default=2, ge=1)


class StallConfig(_Strict):
    """When an upstream response is given up on (``gateway/forward/stall.py``,
    docs/robustness.md). A backend's requests are stalled when its engine stops making
    progress (its /metrics counters stop moving, or its scrapes fail) for
    ``progress_factor`` x its measured step time, at least ``progress_floor_scrapes``
    scrapes (each the longer of the scrape interval and a scrape's 1 s deadline). Between a
    stream's events, silence is bounded by its measured inter-token gaps.
    ``first_token_s``/``inter_token_s`` add a fixed bound."""

    cut_when_down: bool = True
    progress_factor: float = Field(default=4.0, ge=1)
    progress_floor_scrapes: float = Field(default=4.0, ge=1)
    inter_token_factor: float = Field(default=50.0, ge=1)
    min_inter_token_s: float = Field(default=5.0, gt=0)
    first_token_s: float | None = Field(default=None, gt=0)
    inter_token_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _removed_fields(cls, data: Any) -> Any:
        removed = sorted(set(data) & set(_REMOVED_STALL_FIELDS)) if isinstance(data, dict) else []
        if removed:
            raise ValueError(f"{', '.join(removed)}: {_REMOVED_STALL_FIELDS[removed[0]]}")
        return data


_REMOVED_STALL_FIELDS = dict.fromkeys(
    ("min_first_token_s", "first_token_factor"),
    "removed: a request waiting for its first token is no longer cut for being slow, only when "
    "its backend stops making progress (stall.progress_factor, stall.progress_floor_scrapes) "
    "or past server.read_timeout_s; set stall.first_token_s for a fixed bound",
)


class ScrapeConfig(_Strict):
    enabled: bool = True
    interval_s: float = Field(default=0.5, ge=0.05)
    max_age_s: float | None = Field(default=None, gt=0)


class ReloadConfig(_Strict):
    watch: bool = True
    interval_s: float = Field(default=1.0, gt=0)


class StateConfig(_Strict):
    """Where limits shared by several gateway replicas live (docs/fleet.md).

    ``local``: in this process (one replica; nothing shared). ``redis``: tenant quotas and
    concurrency leases in Redis or Valkey, one script call at admission and one at release.
    Times are milliseconds where a request waits on them, seconds for leases."""

    backend: Literal["local", "redis"] = "local"
    url: str | None = Field(default=None, pattern=r"^rediss?://[^\s]+$")
    password_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="environment variable holding the password (never in the file)",
    )
    key_prefix: str = Field(default="sluicegate:", min_length=1, max_length=64)
    connect_timeout_ms: int = Field(default=100, gt=0, le=5000)
    command_timeout_ms: int = Field(default=100, gt=0, le=5000)
    on_failure: Literal["local_share", "closed"] = "local_share"
    lease_ttl_s: float = Field(default=30.0, ge=1.0, le=300.0)
    sync_interval_ms: int = Field(default=1000, ge=10, le=60_000)
    retry_interval_ms: int = Field(default=500, ge=10, le=60_000)
    peer_sync_interval_ms: int = Field(default=100, ge=10, le=10_000)
    initial_replicas: int = Field(
        default=1, ge=1, description="N for the local share before Redis has ever answered"
    )
    fair_share: bool = Field(
        default=True, description="share the fairness counters (vtc) across replicas"
    )
    fair_share_interval_ms: int = Field(default=100, ge=10, le=10_000)
    fair_share_allowance_tokens: float = Field(
        default=1000.0,
        ge=0.0,
        description="virtual tokens a tenant may lead a tenant queued on another replica",
    )

    @model_validator(mode="after")
    def _coherent(self) -> StateConfig:
        if self.backend == "redis" and self.url is None:
            raise ValueError("backend redis needs a url (redis:// or rediss://)")
        if self.url is not None and "@" in self.url.split("/")[2]:
            raise ValueError("the url must not hold credentials: name them in password_env")
        if self.sync_interval_ms * 3 > self.lease_ttl_s * 1000:
            raise ValueError("sync_interval_ms must be at most a third of lease_ttl_s")
        return self


class EppTlsConfig(_Strict):
    """TLS on the picker's gRPC port (ext_proc and health). The files are read again when
    they change (cert-manager renews a Secret in place): no restart."""

    cert_file: str = Field(description="PEM certificate chain (a Secret's tls.crt)")
    key_file: str = Field(description="PEM private key of that certificate (tls.key)")
    client_ca_file: str | None = Field(
        default=None,
        description="PEM CA bundle: when set, every client must present a certificate that "
        "chains to it (mutual TLS)",
    )

    @model_validator(mode="after")
    def _files(self) -> EppTlsConfig:
        check_material(self.cert_file, self.key_file, self.client_ca_file)
        return self


class EppConfig(_Strict):
    """``sluicegate epp``: the Endpoint Picker served to Envoy over ext_proc (docs/epp.md)."""

    host: str = "127.0.0.1"
    port: int = Field(default=9002, ge=0, le=65535, description="the ext_proc gRPC port")
    fairness_id: Literal["ignore", "tenant"] = Field(
        default="ignore",
        description="x-gateway-inference-fairness-id names the tenant (a gateway in front "
        "authenticated the caller) or is ignored (the API key names it)",
    )
    request_body_mode: Literal["FULL_DUPLEX_STREAMED", "BUFFERED"] = Field(
        default="FULL_DUPLEX_STREAMED",
        description="what Envoy's processing_mode says, for an Envoy that does not send it",
    )
    response_body_mode: Literal["FULL_DUPLEX_STREAMED", "STREAMED", "BUFFERED"] = Field(
        default="STREAMED",
        description="what Envoy's processing_mode says, for an Envoy that does not send it",
    )
    fallbacks: int = Field(
        default=0,
        ge=0,
        le=8,
        description="healthy endpoints listed after the chosen one (only for gateways that "
        "try them in order; Envoy's ORIGINAL_DST cluster reads one address)",
    )
    tls: EppTlsConfig | None = Field(
        default=None, description="serve the gRPC port over TLS (absent: cleartext)"
    )


class GatewayConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    workload_classes: list[str] = ["interactive", "batch", "background", "shadow"]
    default_workload_class: str = "interactive"
    tenants: list[TenantConfig] = Field(default_factory=list)
    backends: list[BackendConfig] = Field(default_factory=list)
    discovery: DiscoveryConfig | None = None
    health: HealthConfig = Field(default_factory=HealthConfig)
    scrape: ScrapeConfig = Field(default_factory=ScrapeConfig)
    stall: StallConfig = Field(default_factory=StallConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    async_jobs: AsyncJobsConfig = Field(default_factory=AsyncJobsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    epp: EppConfig = Field(default_factory=EppConfig)
    policy: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cross_references(self, info: ValidationInfo) -> GatewayConfig:
        """Checked here for configs built in code; ``load_config_bytes`` checks them on
        the file's own data instead, each at its line, also when fields are invalid."""
        if isinstance(info.context, Mapping) and info.context.get(_LOCATED):
            return self
        problems = reference_problems(self.model_dump(mode="json"))
        if problems:
            raise ValueError("; ".join(f"{_dotted(loc)}: {msg}" for loc, msg in problems))
        return self

    def tenant(self, name: str) -> TenantConfig | None:
        return next((t for t in self.tenants if t.name == name), None)


_LOCATED = "references checked by the loader"


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config file, located by line (0 when unknown) and YAML path."""

    file: str
    line: int
    loc: Loc
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        if not self.loc:
            return f"{where}: {self.message}"
        return f"{where}: {_dotted(self.loc)}: {self.message}"


class ConfigError(Exception):
    """All problems found in one config file, reported together."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config plus where it came from and its version (hash of the settings)."""

    config: GatewayConfig
    version: str
    source: str
    lines: LineIndex


def config_version(cfg: GatewayConfig) -> str:
    """12 hex digits of the sha256 of the config's canonical JSON (defaults filled in): the
    same settings give the same version, whatever the file's comments and formatting."""
    canon = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:12]


def load_config_bytes(raw: bytes, source: str = "<config>") -> LoadedConfig:
    """Parse and validate; raises ``ConfigError`` listing every problem with its line."""
    try:
        data, lines = load_yaml_with_lines(raw.decode("utf-8"))
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_yaml_issue(exc, source)]) from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = raw[: getattr(exc, "start", 0)].count(b"\n") + 1
        raise ConfigError([ConfigIssue(source, line, (), f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, Mapping):
        raise ConfigError([ConfigIssue(source, 1, (), "the top level must be a mapping")])
    unencodable = list(_lone_surrogates(data, ()))
    if unencodable:  # YAML's "\uD800" escapes: nothing downstream can encode such text
        raise ConfigError(issues_at(source, lines, (), unencodable))
    issues = issues_at(source, lines, (), reference_problems(data))
    try:
        cfg = GatewayConfig.model_validate(data, context={_LOCATED: True})
    except ValidationError as exc:
        issues += _issues_from_pydantic(exc, source, lines)
    if issues:
        raise ConfigError(sorted(issues, key=lambda i: i.line))
    return LoadedConfig(cfg, config_version(cfg), source, lines)


def _lone_surrogates(value: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    """Where a key or a string holds a lone UTF-16 surrogate (not valid Unicode text)."""
    message = "not valid Unicode: a lone surrogate (a \\uD800-\\uDFFF escape)"
    if isinstance(value, str):
        if not value.isascii() and _has_surrogate(value):
            yield loc, message
    elif isinstance(value, Mapping):
        for key, item in value.items():
            at = (*loc, key if isinstance(key, str | int) else str(key))
            if isinstance(key, str) and not key.isascii() and _has_surrogate(key):
                yield at, message
            else:
                yield from _lone_surrogates(item, at)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _lone_surrogates(item, (*loc, i))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _yaml_issue(exc: yaml.MarkedYAMLError, source: str) -> ConfigIssue:
    """One line, at the problem's line, naming the file (not PyYAML's "<unicode string>")."""
    mark = exc.problem_mark or exc.context_mark
    parts = [p for p in (exc.context, exc.problem) if p]
    where = f" (column {mark.column + 1})" if mark is not None else ""
    line = mark.line + 1 if mark is not None else 1
    return ConfigIssue(source, line, (), f"not valid YAML: {', '.join(parts)}{where}")


def load_config(path: str | Path) -> LoadedConfig:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError([unreadable(p, exc)]) from exc
    return load_config_bytes(raw, str(p))


def unreadable(path: str | Path, exc: OSError) -> ConfigIssue:
    """A file that cannot be read, said plainly: ``FILE: cannot read: No such file...``."""
    return ConfigIssue(str(path), 0, (), f"cannot read: {exc.strerror or exc}")


def _issues_from_pydantic(exc: ValidationError, source: str, lines: LineIndex) -> list[ConfigIssue]:
    issues = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        msg = error_message(GatewayConfig, err)
        issues.append(ConfigIssue(source, lines.line_of(loc), loc, msg))
    return issues


def issues_at(
    source: str, lines: LineIndex, prefix: Loc, errors: Sequence[tuple[Loc, str]]
) -> list[ConfigIssue]:
    """Map errors located relative to a section (e.g. the policy registry's) to file lines."""
    out = []
    for loc, msg in errors:
        full = (*prefix, *loc)
        out.append(ConfigIssue(source, lines.line_of(full), full, msg))
    return out
