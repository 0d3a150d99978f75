"""What a reload changes now, what waits for a restart, and the version of what is in force.

A reload applies the file's hot settings (``HOT``, and ``HOT_IN`` of ``server`` and
``tracing``); every other setting (``backends``, ``health``, ``scrape``, ``stall``, ``reload``,
the rest of ``server`` and ``tracing``) stays as the
process started with it until the next restart. The config in force is therefore the file's
hot settings over the started process's restart-only ones, and its version
(``schema.config_version``) is a hash of exactly that: the same settings in force give the same
version, whatever the file's formatting and whatever restart-only edit is still pending.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.config.schema import GatewayConfig
from gateway.tracing.config import HOT_FIELDS as HOT_TRACING

HOT = frozenset(
    {"auth", "tenants", "workload_classes", "default_workload_class", "policy", "async_jobs"}
)
"""Top-level settings a reload applies at once (and ``HOT_SERVER`` of ``server``)."""
HOT_SERVER = frozenset(
    {
        "max_body_bytes",
        "body_timeout_s",
        "max_sequences_per_request",
        "max_attempts",
        "tenant_label_limit",
    }
)
HOT_IN = {"server": HOT_SERVER, "tracing": HOT_TRACING}
"""Sections a reload applies in part: the settings of each it applies at once."""


def in_force(file: GatewayConfig, started: GatewayConfig) -> GatewayConfig:
    """The file's hot settings over the restart-only settings the process started with."""
    restart_only = {k: getattr(started, k) for k in GatewayConfig.model_fields if k not in HOT}
    for section, hot in HOT_IN.items():
        now, wanted = getattr(started, section), getattr(file, section)
        kept = {k: getattr(now, k) for k in type(now).model_fields if k not in hot}
        restart_only[section] = wanted.model_copy(update=kept)
    return file.model_copy(update=restart_only)


def pending_restart(file: GatewayConfig, started: GatewayConfig) -> list[str]:
    """Each restart-only setting where the file differs from what is in force, as
    ``path: <in force> in force, <in the file> in the file``."""
    now, wanted = started.model_dump(mode="json"), file.model_dump(mode="json")
    for key in HOT:
        now.pop(key, None)
        wanted.pop(key, None)
    for section, hot in HOT_IN.items():
        for key in hot:
            now[section].pop(key, None)
            wanted[section].pop(key, None)
    return [f"{path}: {a} in force, {b} in the file" for path, a, b in _diff("", now, wanted)]


def _diff(path: str, a: Any, b: Any) -> list[tuple[str, str, str]]:
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(a.keys() | b.keys()):
            out += _diff(f"{path}.{k}".lstrip("."), a.get(k, _ABSENT), b.get(k, _ABSENT))
        return out
    if _named(a) and _named(b):
        return _diff(path, {i["name"]: i for i in a}, {i["name"]: i for i in b})
    return [(path, _show(a), _show(b))]


def _named(value: Any) -> bool:
    """A list of mappings each with a ``name`` (backends), compared name by name."""
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


_ABSENT = object()


def _show(value: Any) -> str:
    return "absent" if value is _ABSENT else json.dumps(value, separators=(", ", ": "))
