"""Multi-turn agent conversations through one admission policy in front of one emulated
engine with its prefix cache, on a virtual clock: the shape of ``bench/prefix_cache``.

    run = simulate_conversations(load_profile("cpu-tiny"), policy, ConversationShape())
    run.summary.goodput_tps, run.hit_rate, run.refusals

``policy`` is a ``policy:`` mapping (``build_policy``), e.g. a preset's. Agents are spread
over ``shape.tenants`` tenants; each turn's output is ``shape.output_tokens`` exactly (the
bench sends ``ignore_eos``), its think time ``shape.think_mean_s`` on average. A refused
turn is resent unchanged, unmarked as a retry, as the bench's HTTP agents resend it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.profile import LengthComponent, LengthMixture, Profile
from simulation.admission_adapter import SchedulerAdmission
from simulation.conversations import ConversationPrompts, ConversationShape
from simulation.core import Simulation
from simulation.engine_adapter import EmulatedBackend
from simulation.metrics import Summary, TurnRecord, summarise
from simulation.ports import VirtualClock
from simulation.workload import AgentWorkload, BackoffPolicy

MODEL = "sim-model"
SHAPE = ConversationShape()
RESEND_AFTER_1S = BackoffPolicy(base_s=1.0, growth=1.0, cap_s=1.0)
"""A refused turn is resent unchanged a second later, as the bench's agents do."""


@dataclass(frozen=True, slots=True)
class ConversationRun:
    records: list[TurnRecord]
    summary: Summary
    hit_rate: float
    """The engine's prefix-cache hits over queries (vLLM's two counters) over the whole run."""
    refusals: int
    """Turns refused at least once (deferred with a Retry-After)."""


def conversation_workload(shape: ConversationShape, backoff: BackoffPolicy) -> AgentWorkload:
    """The ``AgentWorkload`` of ``shape``: its think time and exact output length."""
    n = shape.output_tokens
    lengths = LengthMixture(components=(LengthComponent(weight=1.0, min_tokens=n, max_tokens=n),))
    return AgentWorkload(lengths, shape.think_mean_s, prompt_tokens=0, backoff=backoff)


def simulate_conversations(
    profile: Profile,
    policy: dict[str, Any],
    shape: ConversationShape = SHAPE,
    *,
    duration_s: float = 60.0,
    warmup_s: float = 0.0,
    backoff: BackoffPolicy = RESEND_AFTER_1S,
) -> ConversationRun:
    clock = VirtualClock()
    backend = EmulatedBackend(profile, model=MODEL)
    prompts = ConversationPrompts(shape, profile, MODEL)
    admission = SchedulerAdmission(
        policy,
        clock=clock,
        model=MODEL,
        estimated_output_tokens=shape.output_tokens,
        seed=shape.seed,
        tenant_of=prompts.tenant_of,
        marks_retries=False,
        blocks_of=prompts.gateway_blocks,
    )
    sim = Simulation(
        n_agents=shape.agents,
        workload=conversation_workload(shape, backoff),
        admission=admission,
        engine=backend,
        clock=clock,
        duration_s=duration_s,
        seed=shape.seed,
        prompts=prompts,
    )
    records = sim.run()
    engine = backend.engine
    hit_rate = engine.prefix_cache_hits / engine.prefix_cache_queries
    refusals = sum(1 for r in records if r.deferrals)
    return ConversationRun(records, summarise(records, warmup_s, duration_s), hit_rate, refusals)
