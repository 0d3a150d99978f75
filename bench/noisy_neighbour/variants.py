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
    "shipped-default",
    "default",
    "fair-share",
    "prefill-bound",
    "fair-share+prefill-bound",
    "fair-share-quarter+prefill-bound",
    "fair-share-preset",
    "fair-share-preset-unbounded",
    "fair-share-preset-no-decode-hold",
    "fair-share-preset-before",
    "fair-share-preset+cache-cost",
    "fair-share-preset+locality",
)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def preset_policy(name: str) -> dict[str, Any]:
    """The ``policy:`` section of the shipped preset ``presets/NAME.yaml``."""
    data = yaml.safe_load((REPO / "presets" / f"{name}.yaml").read_text())
    policy: dict[str, Any] = data["policy"]
    return policy


def _fair_share(reserve: float, bound: bool) -> dict[str, Any]:
    preset = preset_policy("fair-share")
    headroom = {**preset.get("headroom", {}), "reserve_fraction": reserve}
    return {**preset, "headroom": headroom, "prefill_backlog": {"enabled": bound}}


POLICIES: dict[str, Any] = {
    # the policy a config without a ``policy:`` section gets (docs/policies.md)
    "shipped-default": lambda: {},
    # the default policy without, then with, the prefill backlog bound (now the default)
    "default": lambda: {"prefill_backlog": {"enabled": False}},
    "prefill-bound": lambda: {"prefill_backlog": {"enabled": True}},
    # presets/fair-share.yaml with 1/8 of the slots reserved (as it shipped before the
    # bound), then with the bound, then with 1/4 reserved and the bound (as it ships now)
    "fair-share": lambda: _fair_share(0.125, bound=False),
    "fair-share+prefill-bound": lambda: _fair_share(0.125, bound=True),
    "fair-share-quarter+prefill-bound": lambda: _fair_share(0.25, bound=True),
    "fair-share-preset": lambda: preset_policy("fair-share"),
    # the preset as it ships with the prefill backlog bound switched off (the mutation)
    "fair-share-preset-unbounded": lambda: {
        **preset_policy("fair-share"),
        "prefill_backlog": {"enabled": False},
    },
    # the preset as it shipped before the decode hold: prefill target 0.25 s, no hold
    "fair-share-preset-before": lambda: {
        **preset_policy("fair-share"),
        "headroom": {**preset_policy("fair-share")["headroom"], "decode_slowdown_max": None},
        "prefill_backlog": {"enabled": True, "ttft_target_s": 0.25},
    },
    # the preset with the fair share charging computed tokens (cache: docs/policies.md),
    # then with locality routing too
    "fair-share-preset+cache-cost": lambda: {
        **preset_policy("fair-share"),
        "cache": {"fairness_counts": "computed_tokens"},
    },
    "fair-share-preset+locality": lambda: {
        **preset_policy("fair-share"),
        "cache": {"fairness_counts": "computed_tokens", "locality_weight": 4.0},
    },
    # the preset as it ships with its decode hold switched off (the mutation)
    "fair-share-preset-no-decode-hold": lambda: {
        **preset_policy("fair-share"),
        "headroom": {**preset_policy("fair-share")["headroom"], "decode_slowdown_max": None},
    },
}


def policy_of(variant: str) -> dict[str, Any]:
    """The ``policy:`` section of a gateway variant."""
    make = POLICIES.get(variant)
    if make is None:
        raise ValueError(f"unknown variant {variant!r}")
    policy: dict[str, Any] = make()
    return policy


def gateway_config(variant: str, urls: list[str]) -> dict[str, Any]:
    return {
        "tenants": [{"name": name, "api_key_sha256": [_digest(key)]} for name, key in KEYS.items()],
        "backends": backend_entries(urls),
        "health": {"interval_s": 0.5, "timeout_s": 1.0},
        "scrape": {"interval_s": 0.25},
        "policy": policy_of(variant),
    }
