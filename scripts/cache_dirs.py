"""Where the slow-to-build things live between runs: the vLLM and Phoenix venvs, the models."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(env_var: str, name: str) -> Path:
    """``$env_var`` when it is set, else ``~/.cache/sluicegate/<name>``."""
    env = os.environ.get(env_var)
    return Path(env) if env else Path.home() / ".cache" / "sluicegate" / name
