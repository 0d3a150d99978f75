"""Checks across fields of a config, on its plain data (the YAML as loaded, or a model's
dump), so they run and are located also when other fields are invalid.

Each problem is ``(path, message)``: an anonymous tenant that is not configured (at
``auth.anonymous_tenant``), a default class that is not listed, a tenant's unknown class, a
duplicate tenant or backend name or key digest (at the second one), a tenant named in
the policy's parameters (a per-tenant quota) that is not configured, an async job class
(``async_jobs.workload_class``) that is not listed, and backends both listed and discovered,
or neither.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from policies.registry import did_you_mean, tenant_references

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]
DEFAULT_CLASSES = ("interactive", "batch", "background", "shadow")
DEFAULT_CLASS = "interactive"


def reference_problems(data: Mapping[str, Any]) -> list[Problem]:
    tenants = _items(data.get("tenants"))
    known = [t["name"] for _, t in tenants if isinstance(t.get("name"), str)]
    backends = _items(data.get("backends"))
    return [
        *_class_problems(data, tenants),
        *_duplicates("tenant name", [(("tenants", i, "name"), t.get("name")) for i, t in tenants]),
        *_duplicates(
            "backend name", [(("backends", i, "name"), b.get("name")) for i, b in backends]
        ),
        *_duplicates("api key digest", list(_digests(tenants))),
        *_anonymous_problem(data.get("auth"), known),
        *_policy_tenant_problems(data.get("policy"), known),
        *_backend_source_problems(data),
    ]


def _backend_source_problems(data: Mapping[str, Any]) -> Iterator[Problem]:
    listed, discovered = data.get("backends"), data.get("discovery") is not None
    if discovered and listed:
        yield ("discovery",), "the backends are either listed or discovered: drop one of the two"
    elif not discovered and not listed and isinstance(listed, list | None):
        yield ("backends",), "at least one backend is needed (or a discovery: section)"


def _names(key: str, items: list[tuple[int, Mapping[str, Any]]]) -> list[tuple[Loc, Any]]:
    return [((key, i, "name"), item.get("name")) for i, item in items]


def _items(value: Any) -> list[tuple[int, Mapping[str, Any]]]:
    """The mappings of a list, with their indexes (anything else is a field error)."""
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)]


def _class_problems(
    data: Mapping[str, Any], tenants: list[tuple[int, Mapping[str, Any]]]
) -> Iterator[Problem]:
    classes = data.get("workload_classes", list(DEFAULT_CLASSES))
    if not isinstance(classes, list):
        return
    listed = [c for c in classes if isinstance(c, str)]
    default = data.get("default_workload_class", DEFAULT_CLASS)
    if isinstance(default, str) and default not in listed:
        yield ("default_workload_class",), _not_listed(default, listed)
    for i, tenant in tenants:
        allowed = tenant.get("workload_classes")
        for j, cls in enumerate(allowed if isinstance(allowed, list) else []):
            if isinstance(cls, str) and cls not in listed:
                yield ("tenants", i, "workload_classes", j), _not_listed(cls, listed)
        cls = tenant.get("default_class")
        if isinstance(cls, str) and cls not in listed:
            yield ("tenants", i, "default_class"), _not_listed(cls, listed)
    handoff = data.get("async_jobs")
    cls = handoff.get("workload_class", "background") if isinstance(handoff, Mapping) else None
    if isinstance(cls, str) and cls not in listed:
        yield ("async_jobs", "workload_class"), _not_listed(cls, listed)


def _not_listed(cls: str, listed: list[str]) -> str:
    return f"workload class {cls!r} is not in workload_classes{did_you_mean(cls, listed)}"


def _duplicates(what: str, items: list[tuple[Loc, Any]]) -> Iterator[Problem]:
    first: dict[Any, Loc] = {}
    for loc, value in items:
        if not isinstance(value, str):
            continue
        if value in first:
            where = ".".join(map(str, first[value]))
            yield loc, f"duplicate {what} {_shown(what, value)} (first at {where})"
        else:
            first[value] = loc


def _shown(what: str, value: str) -> str:
    return f"{value[:8]}..." if what == "api key digest" else repr(value)


def _digests(tenants: list[tuple[int, Mapping[str, Any]]]) -> Iterator[tuple[Loc, Any]]:
    for i, tenant in tenants:
        digests = tenant.get("api_key_sha256")
        for j, digest in enumerate(digests if isinstance(digests, list) else []):
            yield ("tenants", i, "api_key_sha256", j), digest


def _anonymous_problem(auth: Any, known: list[str]) -> Iterator[Problem]:
    anon = auth.get("anonymous_tenant") if isinstance(auth, Mapping) else None
    if isinstance(anon, str) and anon not in known:
        yield ("auth", "anonymous_tenant"), _not_configured(anon, known)


def _policy_tenant_problems(policy: Any, known: list[str]) -> Iterator[Problem]:
    for loc, name in tenant_references(policy):
        if name not in known:
            yield ("policy", *loc), _not_configured(name, known)


def _not_configured(name: str, known: list[str]) -> str:
    return f"tenant {name!r} is not a configured tenant{did_you_mean(name, known)}"
