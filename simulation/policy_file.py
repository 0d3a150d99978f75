"""A policy read from a YAML file: a whole config's ``policy:`` section, or a bare one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_policy_file(path: Path) -> tuple[str, dict[str, Any]]:
    """(label, ``policy:`` mapping); the label is the policy's ``name``, else the file's stem."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    section = data.get("policy", data)
    if not isinstance(section, dict):
        raise ValueError(f"{path}: the policy section must be a mapping")
    return str(section.get("name", path.stem)), section
