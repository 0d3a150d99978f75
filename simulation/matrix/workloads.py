"""The matrix's workloads: what each cell's tenants send, scaled to a load.

A load is a multiple of the capacity the simulator measured for the workload's main
tenant on the cell's engines (``capacity.py``): a closed-loop tenant gets
``load x rate x (service + think)`` clients (the interactive response-time law), an
open-loop one ``load x rate`` arrivals per second, agent runs ``load x rate / calls per
run`` runs per second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from emulator.profile import LengthComponent, LengthMixture, Profile
from simulation.agent_runs import RunWorkload
from simulation.lengths import lognormal_mixture
from simulation.matrix.traffic import Shape, Tenant, fixed_length


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the engines serve of one tenant shape: ``rate_per_s`` requests per second at
    saturation, ``service_s`` the mean latency of one request alone."""

    rate_per_s: float
    service_s: float


def chat_lengths() -> LengthMixture:
    """Chat answers: mostly short, some a few hundred tokens (mean ~180)."""
    return LengthMixture(
        components=(
            LengthComponent(weight=0.7, min_tokens=16, max_tokens=200),
            LengthComponent(weight=0.3, min_tokens=200, max_tokens=500),
        )
    )


def _closed(tenant: Tenant, load: float, cap: Capacity, share: float = 1.0) -> Tenant:
    n = load * share * cap.rate_per_s * (cap.service_s + tenant.think_mean_s)
    return replace(tenant, clients=max(1, round(n)))


def _open(tenant: Tenant, load: float, cap: Capacity, share: float = 1.0) -> Tenant:
    return replace(tenant, clients=0, rate_per_s=load * share * cap.rate_per_s)


@dataclass(frozen=True, slots=True)
class Workload:
    """``main`` is the tenant shape whose capacity defines 1x; ``tenants`` scales it.
    Agent-run workloads set ``runs`` instead of ``tenants``."""

    name: str
    main: Callable[[Profile], Tenant]
    tenants: Callable[[Profile, float, Capacity], list[Tenant]] | None = None
    runs: Callable[[Profile], RunWorkload] | None = None
    noisy: bool = False
    """Has a victim (``victim``) beside a flooding tenant (``noisy``)."""


def _chat(_: Profile) -> Tenant:
    return Tenant("chat", Shape(256, chat_lengths()), clients=1, think_mean_s=3.0)


def _chat_tenants(p: Profile, load: float, cap: Capacity) -> list[Tenant]:
    return [replace(_closed(_chat(p), load, cap, 1 / 3), name=f"chat-{i}") for i in range(3)]


def _seed(p: Profile) -> Tenant:
    lengths = lognormal_mixture(p.output_lengths.mean, 1.1)
    return Tenant("agents", Shape(64, lengths, hashed=True), clients=1, think_mean_s=4.5)


def _victim() -> Tenant:
    return Tenant("victim", Shape(50, fixed_length(32)), clients=2)


def _noisy(prompt: int, stream: bool) -> Callable[[Profile], Tenant]:
    def main(_: Profile) -> Tenant:
        return Tenant("noisy", Shape(prompt, fixed_length(256), stream=stream), clients=1)

    return main


def _noisy_tenants(prompt: int, stream: bool) -> Callable[[Profile, float, Capacity], list[Tenant]]:
    def tenants(p: Profile, load: float, cap: Capacity) -> list[Tenant]:
        return [_victim(), _closed(_noisy(prompt, stream)(p), load, cap)]

    return tenants


def _conversation(_: Profile) -> Tenant:
    shape = Shape(256, chat_lengths(), turns=6, question_tokens=64, hashed=True)
    return Tenant("conv", shape, clients=1, think_mean_s=3.0)


def _runs(turns: tuple[int, int], deadline_s: float) -> Callable[[Profile], RunWorkload]:
    def runs(p: Profile) -> RunWorkload:
        return RunWorkload(
            p.output_lengths,
            turns_min=turns[0],
            turns_max=turns[1],
            branch_prob=0.5,
            branches=4,
            think_mean_s=5.0,
            deadline_s=deadline_s,
            hints=("deadline",),
        )

    return runs


def _run_call(p: Profile) -> Tenant:
    """One call of a run, for the capacity: the runs' own lengths and prompt."""
    return Tenant("agents", Shape(64, p.output_lengths), clients=1)


def _noisy_workload(name: str, prompt: int, stream: bool) -> Workload:
    return Workload(name, _noisy(prompt, stream), _noisy_tenants(prompt, stream), noisy=True)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("chat", _chat, _chat_tenants),
        Workload("seed-agents", _seed, lambda p, load, cap: [_closed(_seed(p), load, cap)]),
        Workload("runs-short", _run_call, runs=_runs((4, 8), 300.0)),
        Workload("runs-long", _run_call, runs=_runs((12, 20), 900.0)),
        _noisy_workload("noisy-short-stream", 64, True),
        _noisy_workload("noisy-1500", 1500, False),
        _noisy_workload("noisy-1500-stream", 1500, True),
        _noisy_workload("noisy-3000", 3000, False),
        _noisy_workload("noisy-3000-stream", 3000, True),
        Workload(
            "multi-turn",
            _conversation,
            lambda p, load, cap: [
                replace(_closed(_conversation(p), load, cap, 0.5), name=f"conv-{i}")
                for i in range(2)
            ],
        ),
        Workload(
            "bursty",
            _chat,
            lambda p, load, cap: [
                replace(_open(_chat(p), load, cap, 0.75), name="burst", burst=(10.0, 20.0)),
                replace(_open(_chat(p), load, cap, 0.25), name="steady"),
            ],
        ),
        Workload("alone", _chat, lambda p, load, cap: [_open(_chat(p), load, cap)]),
    )
}
