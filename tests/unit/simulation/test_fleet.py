"""The fleet simulator: three replicas of the production scheduler in front of one engine.
Without the fairness sync the tenant entering through one replica gets far less than half
(the defect fleet fair share removes); with it, close to half; the CLI prints the sweep."""

from __future__ import annotations

from emulator.profile import Profile
from simulation.cli import parser
from simulation.fleet import FleetSpec, simulate_fleet
from simulation.fleet_cli import main_fleet


def test_without_the_sync_one_replicas_tenant_gets_its_replicas_part_only(
    profile: Profile,
) -> None:
    result = simulate_fleet(FleetSpec(profile, fair_share_s=None, duration_s=100.0, warmup_s=20.0))
    assert result.solo_share < 0.35, result.served


def test_with_the_sync_both_tenants_get_half_the_engines_tokens(profile: Profile) -> None:
    result = simulate_fleet(FleetSpec(profile, fair_share_s=0.1, duration_s=100.0, warmup_s=20.0))
    assert result.fairness_error < 0.1, result.served
    assert sum(result.served.values()) > 0


def test_the_cli_sweeps_the_sync_interval() -> None:
    lines: list[str] = []
    argv = ["--replicas", "2", "--sync-intervals", "off,0.5", "--duration", "30", "--seeds", "1"]
    assert main_fleet(parser().parse_args(argv), lines.append) == 0
    rows = [line.split(" | ")[1] for line in lines[2:]]
    assert rows == ["off", "0.5"]
