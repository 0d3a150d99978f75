"""A live cell's gateway config: valid, one key per tenant, policy times in wall seconds."""

from __future__ import annotations

from typing import Any

import pytest

from commands.live_services import api_key, gateway_config, scaled_policy
from gateway.config.schema import GatewayConfig
from gateway.request.auth import key_digest
from simulation.matrix.live_cells import select
from simulation.run_cli import resolve_policy, shipped_preset_names


def test_every_time_parameter_is_divided_by_the_speed_and_nothing_else() -> None:
    policy: dict[str, Any] = {
        "name": "p",
        "queue": {"max_wait_s": 60, "max_queued_tokens": 1000},
        "gates": [{"type": "deadline", "parameters": {"grace_s": 2.0, "enabled": True}}],
        "flag_s": True,
    }
    scaled = scaled_policy(policy, 4.0)
    assert scaled["queue"] == {"max_wait_s": 15.0, "max_queued_tokens": 1000}
    assert scaled["gates"][0]["parameters"] == {"grace_s": 0.5, "enabled": True}
    assert scaled["flag_s"] is True and scaled["name"] == "p"
    assert policy["queue"]["max_wait_s"] == 60  # the caller's policy is left as it was


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
