"""The gateway's configuration: a pydantic model of the YAML file, loaded with line numbers.

Every error, including those the policy registry reports for the ``policy:`` section, is
turned into ``file:line: path: message`` so an operator can jump straight to it. The policy
version is a short hash of the file's bytes: two files that differ in any byte are two
versions, and the version is what decisions carry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.config.yaml_lines import LineIndex, load_yaml_with_lines

Loc = tuple[str | int, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=1_048_576, gt=0, description="bigger bodies get 413")
    connect_timeout_s: float = Field(default=3.0, gt=0)
    read_timeout_s: float = Field(default=600.0, gt=0, description="max silence from upstream")
    max_attempts: int = Field(default=3, ge=1, description="dispatches per request")
    tenant_label_limit: int = Field(default=20, ge=1, description="tenants named in metric labels")
    log_records: bool = True


class TenantConfig(_Strict):
    name: str = Field(min_length=1)
    api_key_sha256: list[str] = Field(default_factory=list)
    weight: float = Field(default=1.0, gt=0)
    priority: int = 0
    workload_classes: list[str] | None = None
    default_class: str | None = None
    default_deadline_ms: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _hex_digests(self) -> TenantConfig:
        for digest in self.api_key_sha256:
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError("api_key_sha256 entries are 64 lowercase hex characters")
        return self


class AuthConfig(_Strict):
    anonymous_tenant: str | None = None


class BackendConfig(_Strict):
    name: str = Field(min_length=1)
    url: str = Field(pattern=r"^https?://[^/\s]+(/\S*)?$")
    models: list[str] = Field(min_length=1)
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)


class HealthConfig(_Strict):
    interval_s: float = Field(default=2.0, gt=0)
    timeout_s: float = Field(default=1.0, gt=0)
    failures_to_down: int = Field(default=2, ge=1)


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
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="environment variable holding the password (never in the file)",
    )  # fmt: skip
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

    @model_validator(mode="after")
    def _coherent(self) -> StateConfig:
        if self.backend == "redis" and self.url is None:
            raise ValueError("backend redis needs a url (redis:// or rediss://)")
        if self.url is not None and "@" in self.url.split("/")[2]:
            raise ValueError("the url must not hold credentials: name them in password_env")
        if self.sync_interval_ms * 3 > self.lease_ttl_s * 1000:
            raise ValueError("sync_interval_ms must be at most a third of lease_ttl_s")
        return self


class GatewayConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    workload_classes: list[str] = ["interactive", "batch", "background", "shadow"]
    default_workload_class: str = "interactive"
    tenants: list[TenantConfig] = Field(default_factory=list)
    backends: list[BackendConfig] = Field(min_length=1)
    health: HealthConfig = Field(default_factory=HealthConfig)
    scrape: ScrapeConfig = Field(default_factory=ScrapeConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    policy: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cross_references(self) -> GatewayConfig:
        problems = list(_reference_problems(self))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def tenant(self, name: str) -> TenantConfig | None:
        return next((t for t in self.tenants if t.name == name), None)


def _reference_problems(cfg: GatewayConfig) -> Sequence[str]:
    problems: list[str] = []
    classes = set(cfg.workload_classes)
    if cfg.default_workload_class not in classes:
        problems.append(f"default_workload_class {cfg.default_workload_class!r} not listed")
    for tenant in cfg.tenants:
        for cls in [*(tenant.workload_classes or []), tenant.default_class]:
            if cls is not None and cls not in classes:
                problems.append(f"tenant {tenant.name!r}: unknown workload class {cls!r}")
    for kind, names in (
        ("tenant", [t.name for t in cfg.tenants]),
        ("backend", [b.name for b in cfg.backends]),
    ):
        dupes = sorted({n for n in names if names.count(n) > 1})
        problems += [f"duplicate {kind} name {n!r}" for n in dupes]
    digests = [d for t in cfg.tenants for d in t.api_key_sha256]
    if len(digests) != len(set(digests)):
        problems.append("the same api key digest is listed twice")
    anon = cfg.auth.anonymous_tenant
    if anon is not None and cfg.tenant(anon) is None:
        problems.append(f"auth.anonymous_tenant {anon!r} is not a configured tenant")
    return problems


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config file, located by line (0 when unknown) and YAML path."""

    file: str
    line: int
    loc: Loc
    message: str

    def __str__(self) -> str:
        path = ".".join(str(p) for p in self.loc) or "<root>"
        return f"{self.file}:{self.line}: {path}: {self.message}"


class ConfigError(Exception):
    """All problems found in one config file, reported together."""

    def __init__(self, issues: Sequence[ConfigIssue]) -> None:
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config plus where it came from and its version (hash of the bytes)."""

    config: GatewayConfig
    version: str
    source: str
    lines: LineIndex


def config_version(raw: bytes) -> str:
    """The config file's version: a short hash of its bytes (the policy section alone has
    ``policies.registry.policy_version``)."""
    return hashlib.sha256(raw).hexdigest()[:12]


def load_config_bytes(raw: bytes, source: str = "<config>") -> LoadedConfig:
    """Parse and validate; raises ``ConfigError`` listing every problem with its line."""
    try:
        data, lines = load_yaml_with_lines(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", -1) + 1
        raise ConfigError([ConfigIssue(source, line, (), f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, Mapping):
        raise ConfigError([ConfigIssue(source, 1, (), "the top level must be a mapping")])
    try:
        cfg = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_issues_from_pydantic(exc, source, lines)) from exc
    return LoadedConfig(cfg, config_version(raw), source, lines)


def load_config(path: str | Path) -> LoadedConfig:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError([ConfigIssue(str(p), 0, (), f"cannot read: {exc}")]) from exc
    return load_config_bytes(raw, str(p))


def _issues_from_pydantic(exc: ValidationError, source: str, lines: LineIndex) -> list[ConfigIssue]:
    issues = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        issues.append(ConfigIssue(source, lines.line_of(loc), loc, err["msg"]))
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
