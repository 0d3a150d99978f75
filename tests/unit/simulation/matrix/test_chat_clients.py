"""The matrix's hashed clients: conversations whose resent prefix the engine's prefix cache
serves, and whose gateway hashes reach the scheduler only where the policy reads them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from emulator.profile import load_profile
from policies.backends import BackendsSnapshot
from policies.engine.scheduler import Scheduler, Ticket
from policies.types import Decision, RequestInfo
from simulation.matrix.chat_clients import ChatClient
from simulation.matrix.loop import MatrixSimulation
from simulation.matrix.traffic import Shape, Tenant, fixed_length
from simulation.matrix.workloads import WORKLOADS

PROFILE = load_profile("rx9070xt")
SHAPE = Shape(256, fixed_length(40), turns=4, question_tokens=64, hashed=True)


def _client(seed: str = "t/0") -> ChatClient:
    chat = ChatClient(SHAPE, PROFILE, "m", seed)
    chat.start()
    return chat


def test_the_first_ask_counts_exactly_the_shapes_prompt_tokens() -> None:
    assert _client().prompt(10_000).tokens == 256
    assert _client("t/1").prompt(10_000).engine_blocks != _client().prompt(10_000).engine_blocks


def test_a_next_turn_resends_the_last_prompt_and_grows_by_answer_and_question() -> None:
    chat = _client()
    first = chat.prompt(10_000)
    chat.answered(40)
    second = chat.prompt(10_000)
    assert second.engine_blocks[: len(first.engine_blocks)] == first.engine_blocks
    shared = len(first.gateway_blocks.hashes) - 1  # the closing "]" moved
    assert second.gateway_blocks.hashes[:shared] == first.gateway_blocks.hashes[:shared]
    assert second.tokens - first.tokens >= 40 + 64


def test_an_outgrown_conversation_drops_its_oldest_turn_but_keeps_the_first_ask() -> None:
    chat = _client()
    for _ in range(3):
        chat.answered(40)
    whole = chat.prompt(10_000)
    cut = chat.prompt(whole.tokens - 1)
    assert cut.tokens < whole.tokens and len(chat.messages) == 5
    head = _client().prompt(10_000).engine_blocks
    assert cut.engine_blocks[: len(head) - 1] == head[: len(head) - 1]


def _run(policy: dict[str, Any], hashed: bool) -> tuple[MatrixSimulation, list[RequestInfo]]:
    """Six clients of ``SHAPE`` on two backends; what the scheduler was told of each."""
    tenant = Tenant("conv", replace(SHAPE, hashed=hashed), clients=6, think_mean_s=1.0)
    sim = MatrixSimulation.alone(tenant, policy, PROFILE, 2, duration_s=30.0, seed=1)
    recording = _Recording(sim.scheduler)
    sim.scheduler = recording  # type: ignore[assignment]
    sim.run()
    return sim, recording.told


class _Recording:
    """The simulation's scheduler, keeping every request it is told (a wrapper, not a
    patched method: the compiled core's classes take no new attributes)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self.told: list[RequestInfo] = []

    def submit(self, req: RequestInfo, fleet: BackendsSnapshot) -> Ticket | Decision:
        self.told.append(req)
        return self._scheduler.submit(req, fleet)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scheduler, name)


def test_the_engines_serve_the_resent_prefix_and_the_turns_start_sooner() -> None:
    (blind, _), (hashed, told) = _run({"name": "d"}, False), _run({"name": "d"}, True)
    hits = sum(e.engine.prefix_cache_hits for e in hashed.engines.values())
    assert hits > 0 == sum(e.engine.prefix_cache_hits for e in blind.engines.values())
    assert told and all(r.blocks is None for r in told)  # the default hashes nothing

    def busy(sim: MatrixSimulation) -> float:  # engine prefill: first token after dispatch
        done = [r for r in sim.out.requests if r.first_token is not None and r.turn > 0]
        return sum(r.first_token - (r.dispatched or 0.0) for r in done) / len(done)

    assert busy(hashed) < busy(blind)


def test_a_policy_that_models_prefixes_gets_the_gateways_hashes() -> None:
    sim, told = _run({"name": "l", "cache": {"locality_weight": 1.0}}, True)
    assert len(told) >= len(sim.out.requests) > 0
    for req in told:  # request "conv-N#attempt" is the client's N-th request
        hashed = sim.out.requests[int(req.request_id[len("conv-") :].split("#")[0])].hashed
        assert hashed is not None and req.blocks == hashed.gateway_blocks
        assert req.blocks.hashes


def test_the_conversation_and_seed_agent_workloads_are_hashed_and_no_other() -> None:
    hashed = {n for n, w in WORKLOADS.items() if w.main(PROFILE).shape.hashed}
    assert hashed == {"multi-turn", "seed-agents"}
