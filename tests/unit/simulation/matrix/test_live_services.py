"""A live cell's gateway config: valid, one key per tenant, policy times in wall seconds."""

from __future__ import annotations

from typing import Any

import pytest

from commands.live_services import api_key, gateway_config, scaled_policy, with_time_defaults
from gateway.config.schema import GatewayConfig
from gateway.request.auth import key_digest
from policies.disciplines.codel_params import CodelParams
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.retry_after_params import RetryAfterParams
from policies.gates.retry_budget_params import RetryBudgetParams
from policies.registry import build_policy
from simulation.matrix.live_cells import select
from simulation.run_cli import resolve_policy, shipped_preset_names


def test_times_are_divided_by_the_speed_rates_multiplied_and_nothing_else() -> None:
    policy: dict[str, Any] = {
        "name": "p",
        "queue": {"max_wait_s": 60, "max_queued_tokens": 1000},
        "gates": [
            {"type": "retry_budget", "parameters": {"window_s": 2.0, "min_retries_per_s": 0.5}},
            {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": 1001}}},
        ],
        "flag_s": True,
    }
    scaled = scaled_policy(policy, 4.0)
    assert scaled["queue"] == {"max_wait_s": 15.0, "max_queued_tokens": 1000}
    assert scaled["gates"][0]["parameters"] == {"window_s": 0.5, "min_retries_per_s": 2.0}
    assert scaled["gates"][1]["parameters"]["default"]["tokens_per_minute"] == 4004
    assert scaled["flag_s"] is True and scaled["name"] == "p"
    assert policy["queue"]["max_wait_s"] == 60  # the caller's policy is left as it was


def test_the_default_times_are_written_out_so_that_they_scale_too() -> None:
    written = with_time_defaults({"name": "default", "queue": {"max_wait_s": 12.0}})
    assert written["queue"]["max_wait_s"] == 12.0  # what the policy says stays
    assert written["prefill_backlog"]["ttft_target_s"] == PrefillBacklogParams().ttft_target_s
    assert written["retry_after"]["max_s"] == RetryAfterParams().max_s
    codel = with_time_defaults({"queue": {"discipline": {"type": "codel"}}})
    assert codel["queue"]["discipline"]["parameters"]["interval_s"] == CodelParams().interval_s
    gates = with_time_defaults({"gates": [{"type": "retry_budget"}]})["gates"]
    assert gates[0]["parameters"]["window_s"] == RetryBudgetParams().window_s
    assert build_policy(scaled_policy(written, 4.0)).prefill_backlog.ttft_target_s == (
        PrefillBacklogParams().ttft_target_s / 4
    )


@pytest.mark.parametrize("preset", ["default", *shipped_preset_names()])
def test_the_config_of_a_live_cell_validates_for_every_policy(preset: str) -> None:
    lc = select(["noisy-1500/rx9070xt/2x/1b"])[0]
    _, policy = resolve_policy(preset)
    raw = gateway_config(lc, policy, ["victim", "noisy"], ["http://127.0.0.1:1"], port=2)
    cfg = GatewayConfig.model_validate(raw)
    assert [t.name for t in cfg.tenants] == ["victim", "noisy"]
    assert raw["tenants"][0]["api_key_sha256"] == [key_digest(api_key("victim"))]
    assert [b.max_num_seqs for b in cfg.backends] == [8]  # the rx9070xt profile's slots


def test_agent_runs_come_in_as_the_anonymous_tenant() -> None:
    lc = select(["runs-short/cpu-tiny/1x/1b"])[0]
    raw = gateway_config(
        lc, {"name": "default"}, ["agents"], ["http://127.0.0.1:1"], anonymous="agents", port=2
    )
    cfg = GatewayConfig.model_validate(raw)
    assert cfg.auth.anonymous_tenant == "agents"
    assert raw["tenants"] == [{"name": "agents", "api_key_sha256": []}]
