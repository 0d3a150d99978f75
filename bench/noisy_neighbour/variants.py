"""The setups compared side by side: vLLM direct and the gateway with several policies."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from bench.noisy_neighbour.fleet import backend_entries

REPO = Path(__file__).resolve().parents[2]
KEYS = {"victim": "sk-bench-victim", "noisy": "sk-bench-noisy"}
VARIANTS = (
    "direct",
    "default",
    "fair-share",
    "prefill-bound",
    "fair-share+prefill-bound",
    "fair-share-quarter+prefill-bound",
)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _preset(name: str) -> dict[str, Any]:
    data = yaml.safe_load((REPO / "presets" / f"{name}.yaml").read_text())
    policy: dict[str, Any] = data["policy"]
    return policy


def policy_of(variant: str) -> dict[str, Any]:
    """The ``policy:`` section of a gateway variant."""
    if variant == "default":
        return {"prefill_backlog": {"enabled": False}}
    if variant == "prefill-bound":
        return {"prefill_backlog": {"enabled": True}}
    if variant == "fair-share":
        return {**_preset("fair-share"), "prefill_backlog": {"enabled": False}}
    if variant == "fair-share+prefill-bound":
        return {**_preset("fair-share"), "prefill_backlog": {"enabled": True}}
    if variant == "fair-share-quarter+prefill-bound":
        preset = _preset("fair-share")
        headroom = {**preset["headroom"], "reserve_fraction": 0.25}
        return {**preset, "headroom": headroom, "prefill_backlog": {"enabled": True}}
    raise ValueError(f"unknown variant {variant!r}")


def gateway_config(variant: str, urls: list[str]) -> dict[str, Any]:
    return {
        "tenants": [{"name": name, "api_key_sha256": [_digest(key)]} for name, key in KEYS.items()],
        "backends": backend_entries(urls),
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "scrape": {"interval_s": 0.25},
        "policy": policy_of(variant),
    }
