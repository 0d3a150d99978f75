"""The simulator's stand-in for the gateway: what the scheduler is told about each turn."""

from __future__ import annotations

from emulator.profile import Profile
from policies.backends import BackendsSnapshot
from policies.types import PromptBlocks
from simulation.admission_adapter import SchedulerAdmission
from simulation.catalog import SEED_POLICIES
from simulation.engine_adapter import EmulatedBackend
from simulation.ports import Attempt, Dispatched, VirtualClock


def charged(profile: Profile, hint: bool, lengths: list[int]) -> list[int]:
    """The tokens the scheduler charges for each turn, dispatched and completed in order."""
    clock = VirtualClock()
    fleet = BackendsSnapshot(at=0.0, backends=(EmulatedBackend(profile).view(0.0),))
    adm = SchedulerAdmission(
        SEED_POLICIES["unbounded"],
        clock=clock,
        model="sim-model",
        estimated_output_tokens=354,
        seed=1,
        max_tokens_hint=hint,
    )
    out = []
    for i, tokens in enumerate(lengths):
        before = adm.scheduler.stats().charged_tokens
        verdict = adm.submit(Attempt(f"r{i}", "agent-0", 64, tokens, is_retry=False), fleet)
        assert isinstance(verdict, Dispatched)
        out.append(adm.scheduler.stats().charged_tokens - before)
        clock.now += 1.0
        adm.release(f"r{i}", (64, tokens), clock.now - 0.5, clock.now)
    return out


def test_without_a_hint_every_turn_is_charged_the_mean(profile: Profile) -> None:
    assert charged(profile, False, [10, 1000, 3000]) == [64 + 354] * 3


def test_with_the_swarms_max_tokens_the_estimate_is_the_gateways(profile: Profile) -> None:
    # before any history, max_tokens bounds the estimate: the turn's own length
    first = charged(profile, True, [10, 1000, 3000])
    assert first == [74, 1064, 3064]
    # with history (5+ turns of 100 tokens), the flow's p90 caps a long turn's max_tokens
    later = charged(profile, True, [100] * 6 + [3000, 20])
    assert later[-2:] == [64 + 100, 64 + 20]


def _asked(profile: Profile, policy: dict[str, object]) -> list[str]:
    """The sessions whose prompt hashes the adapter asked for, one turn of ``agent-3``."""
    asked: list[str] = []

    def blocks_of(session: str) -> PromptBlocks:
        asked.append(session)
        return PromptBlocks((1, 2, 3), 16.0)

    fleet = BackendsSnapshot(at=0.0, backends=(EmulatedBackend(profile).view(0.0),))
    adm = SchedulerAdmission(
        policy,
        clock=VirtualClock(),
        model="m",
        estimated_output_tokens=10,
        seed=1,
        blocks_of=blocks_of,
    )
    adm.submit(Attempt("r0", "agent-3", 64, 10, is_retry=False), fleet)
    return asked


def test_prompt_hashes_go_to_the_scheduler_only_where_the_policy_keeps_a_prefix_model(
    profile: Profile,
) -> None:
    assert _asked(profile, {"cache": {"locality_weight": 1.0}}) == ["agent-3"]
    assert _asked(profile, {"cache": {"fairness_counts": "computed_tokens"}}) == ["agent-3"]
    assert _asked(profile, {}) == []  # the default hashes nothing, as the gateway
