"""``sluicegate check-config FILE``: validate a config and print every error, located.

The gateway sections and the ``policy:`` section are validated independently, so one bad
section does not hide the errors of another. Exit status: 0 valid, 1 invalid, 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gateway.config.reload import build_loaded_policy
from gateway.config.schema import (
    ConfigError,
    ConfigIssue,
    LoadedConfig,
    issues_at,
    load_config_bytes,
    unreadable,
)
from gateway.config.yaml_lines import LineIndex, load_yaml_with_lines
from policies.registry import PolicyConfigError, build_policy


def check_file(path: str | Path) -> tuple[LoadedConfig | None, list[ConfigIssue]]:
    """The loaded config (when fully valid) and every problem found; a valid file holding
    only a `policy:` section (a preset) gives (None, [])."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        return None, [unreadable(path, exc)]
    source = str(path)
    parsed = _parse(raw)
    if parsed is not None and set(parsed[0]) == {"policy"}:
        return None, _policy_issues(*parsed, source)
    try:
        loaded = load_config_bytes(raw, source)
    except ConfigError as exc:
        policy = [] if parsed is None else _policy_issues(*parsed, source)
        return None, sorted(exc.issues + policy, key=lambda issue: issue.line)
    try:
        build_loaded_policy(loaded)
    except ConfigError as exc:
        return None, exc.issues
    return loaded, []


def _parse(raw: bytes) -> tuple[Mapping[str, Any], LineIndex] | None:
    """The file as a YAML mapping with its lines, or None (``load_config_bytes`` reports
    why)."""
    try:
        data, lines = load_yaml_with_lines(raw.decode("utf-8"))
    except Exception:
        return None
    return (data, lines) if isinstance(data, Mapping) else None


def _policy_issues(data: Mapping[str, Any], lines: LineIndex, source: str) -> list[ConfigIssue]:
    """Errors of the ``policy:`` section alone (also found when other sections failed)."""
    if not isinstance(data.get("policy"), Mapping | None):
        return []
    try:
        build_policy(data.get("policy"))
    except PolicyConfigError as exc:
        return issues_at(source, lines, ("policy",), exc.errors)
    return []


def print_issues(issues: Iterable[ConfigIssue]) -> None:
    for issue in issues:
        print(issue, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sluicegate check-config", description=__doc__)
    parser.add_argument("file")
    args = parser.parse_args(argv)
    loaded, issues = check_file(args.file)
    if loaded is None and not issues:
        print(f"{args.file}: ok (a policy section only: copy it into a config's `policy:`)")
        return 0
    if issues or loaded is None:
        print_issues(issues)
        print(f"{args.file}: {len(issues)} error(s)", file=sys.stderr)
        return 1
    cfg = loaded.config
    found = cfg.discovery.kubernetes if cfg.discovery is not None else None
    backends = (
        f"{len(cfg.backends)} backend(s)"
        if found is None
        else f"backends: the ready pods of InferencePool {found.inference_pool}"
    )
    print(f"{args.file}: ok (version {loaded.version}, {backends}, {len(cfg.tenants)} tenant(s))")
    return 0
