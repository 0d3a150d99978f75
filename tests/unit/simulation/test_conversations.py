"""Multi-turn conversations in the simulator: prompts that grow, the engine's prefix cache
serving what was sent before, tenants, and a quota that counts what the engine computes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from emulator.profile import load_profile
from emulator.text import chat_prompt_text
from simulation.conversation_run import simulate_conversations
from simulation.conversations import Conversation, ConversationPrompts, ConversationShape

REPO = Path(__file__).resolve().parents[3]
PROFILE = load_profile("cpu-tiny")


def test_each_turn_resends_the_conversation_and_restarts_after_its_last_turn() -> None:
    shape = ConversationShape(turns_per_conversation=3)
    conv = Conversation(shape, agent=5)
    first = chat_prompt_text(conv.messages)
    conv.answered("sure")
    second = chat_prompt_text(conv.messages)
    assert second.startswith(first) and "sure" in second
    assert len(second.split()) > len(first.split()) + shape.turn_words - 1
    conv.answered("done")
    conv.answered("again")
    assert conv.messages[0] == {"role": "system", "content": conv.messages[0]["content"]}
    assert len(conv.messages) == 2 and conv.turn == 0
    assert conv.messages[0]["content"].startswith("Agent 5.")
    assert conv.tenant == "tenant-1" and Conversation(shape, agent=4).tenant == "tenant-0"


def test_agents_speak_their_own_words_and_the_same_seed_gives_the_same_words() -> None:
    shape = ConversationShape()
    a, b = Conversation(shape, 0), Conversation(shape, 1)
    assert a.messages[0]["content"] != b.messages[0]["content"]
    assert Conversation(shape, 0).messages == a.messages


def test_prompts_share_their_blocks_with_the_previous_turn() -> None:
    prompts = ConversationPrompts(ConversationShape(), PROFILE, "m")
    tokens, hashes = prompts.prompt(0)
    chunks = prompts.gateway_blocks("agent-0").hashes
    assert prompts.prompt(0) == (tokens, hashes)  # the same turn until it is answered
    prompts.answered(0, 48)
    grown, grown_hashes = prompts.prompt(0)
    assert grown > tokens
    assert grown_hashes[: len(hashes)] == hashes
    grown_chunks = prompts.gateway_blocks("agent-0").hashes
    assert grown_chunks[: len(chunks) - 1] == chunks[:-1]  # all but the one the "]" ended
    assert len(grown_chunks) > len(chunks)
    assert prompts.tenant_of("agent-3") == "tenant-1"


def _fair_share(counts: str) -> dict[str, Any]:
    """The preset with a quota counting ``counts``, at 60,000 tokens a minute a tenant."""
    policy: dict[str, Any] = yaml.safe_load((REPO / "presets/fair-share.yaml").read_text())[
        "policy"
    ]
    policy = copy.deepcopy(policy)
    quota = {"counts": counts, "default": {"tokens_per_minute": 60_000}}
    policy["gates"].insert(0, {"type": "tenant_quota", "parameters": quota})
    return policy


def test_a_quota_counting_computed_tokens_lets_cached_conversations_through() -> None:
    shape = ConversationShape(think_mean_s=0.5)
    computed = simulate_conversations(PROFILE, _fair_share("computed_tokens"), shape, duration_s=60)
    billed = simulate_conversations(PROFILE, _fair_share("prompt_tokens"), shape, duration_s=60)
    assert computed.hit_rate > 0.6
    assert computed.refusals == 0
    assert billed.refusals > 0
    assert computed.summary.goodput_tps > billed.summary.goodput_tps
