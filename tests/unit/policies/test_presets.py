"""Every shipped preset builds into a valid policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from policies.registry import build_policy

PRESETS = sorted((Path(__file__).parents[3] / "presets").glob("*.yaml"))


def test_the_four_presets_ship() -> None:
    names = {p.stem for p in PRESETS}
    assert {"fixed-cap", "codel", "fair-share", "agent-swarm"} <= names


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_builds(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert set(doc) == {"policy"}
    policy = build_policy(doc["policy"])
    assert policy.name == path.stem
