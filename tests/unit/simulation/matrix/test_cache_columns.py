"""The three cache columns of a policy: what each one charges and how it places."""

from __future__ import annotations

from policies.gates.quota_params import QuotaCounts
from policies.registry import build_policy
from simulation.matrix.cache_columns import FAIRNESS_COLUMNS, columns, label, table, variant
from simulation.matrix.evaluate import shipped_policies
from simulation.matrix.guard import CellRow, TenantRow

FAIR = dict(shipped_policies())["fair-share"]
QUOTA = {"type": "tenant_quota", "parameters": {"counts": "computed_tokens"}}
FAIR_QUOTA = {**FAIR, "gates": [QUOTA, *FAIR["gates"]]}
"""The preset with a quota, as a deployment with agreed quotas runs it."""


def _quota_counts(policy: dict) -> list[str]:
    return [g["parameters"]["counts"] for g in policy["gates"] if g["type"] == "tenant_quota"]


def test_blind_counts_every_token_and_the_aware_columns_what_the_engine_computes() -> None:
    blind, cost, local = (variant(FAIR_QUOTA, c) for c in ("blind", "cost", "locality"))
    assert _quota_counts(blind) == ["prompt_tokens"]
    assert _quota_counts(cost) == _quota_counts(local) == ["computed_tokens"]
    assert not build_policy(blind).models_prefixes
    assert build_policy(cost).cache.fairness_counts is QuotaCounts.COMPUTED_TOKENS
    assert build_policy(cost).cache.locality_weight == 0.0
    assert build_policy(local).cache.locality_weight == 4.0
    assert _quota_counts(FAIR_QUOTA) == ["computed_tokens"]  # the policy itself is untouched


def test_the_defaults_blind_column_is_the_matrixs_default() -> None:
    labels = [name for name, _ in columns([("default", {}), ("fair-share", FAIR)])]
    assert labels == [
        "default",
        "default:cost",
        "default:locality",
        "fair-share:blind",
        "fair-share:cost",
        "fair-share:locality",
    ]
    assert label("fair-share", "blind") == "fair-share:blind"


def _row(policy: str, goodput: float, ttft: float) -> CellRow:
    tenant = TenantRow(ttft, 1.0, 0.5, 0.5)
    return CellRow("multi-turn", "p", 1.0, 2, policy, goodput, 1.0, {"a": tenant})


def test_the_table_gives_the_aware_columns_as_ratios_to_blind() -> None:
    rows = [_row("default", 100.0, 2.0), _row("default:cost", 110.0, 1.0)]
    rows.append(_row("default:locality", 150.0, 3.0))
    assert table(rows, ["default"])[2] == (
        "| multi-turn/p/1x/2b | default | 100 | 1.10x | 1.50x | 2.00 | 0.50x | 1.50x |"
    )


def test_the_fairness_columns_change_only_the_fair_shares_count() -> None:
    shipped, fairness = (variant(FAIR, c) for c in FAIRNESS_COLUMNS)
    assert shipped == FAIR
    assert {**fairness, "cache": FAIR.get("cache", {})} == FAIR
    assert build_policy(fairness).cache.fairness_counts is QuotaCounts.COMPUTED_TOKENS
    rows = [_row("default", 100.0, 2.0), _row("default:fairness", 90.0, 2.5)]
    assert table(rows, ["default"], FAIRNESS_COLUMNS) == [
        "| cell | policy | shipped tok/s | fairness | shipped TTFT p99 s | fairness |",
        "|---|---|---|---|---|---|",
        "| multi-turn/p/1x/2b | default | 100 | 0.90x | 2.00 | 1.25x |",
    ]
