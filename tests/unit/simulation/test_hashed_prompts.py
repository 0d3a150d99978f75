"""A simulated chat prompt hashed as the live path hashes it: the engine's blocks as the
emulator's server makes them, the gateway's chunks as the gateway's ``prepare`` does."""

from __future__ import annotations

from emulator.prefix_hash import block_hashes
from emulator.profile import load_profile
from emulator.text import prompt_token_ids
from gateway.metrics.records import canonical_prompt
from policies.prompt_blocks import prompt_blocks
from simulation.hashed_prompts import canonical_messages, hash_chat

PROFILE = load_profile("rx9070xt")
MESSAGES = [
    {"role": "user", "content": "lis le fichier « café » et corrige-le " * 12},
    {"role": "assistant", "content": 'done: "ok"\n' * 9},
    {"role": "user", "content": "now run the tests " * 10},
]


def test_the_canonical_bytes_are_the_gateways() -> None:
    assert canonical_messages(MESSAGES) == canonical_prompt(MESSAGES)


def test_the_engine_blocks_and_tokens_are_what_the_emulators_server_computes() -> None:
    ids = prompt_token_ids({"messages": MESSAGES}, True, PROFILE)
    hashed = hash_chat(MESSAGES, PROFILE, "m")
    assert hashed.tokens == len(ids)
    assert hashed.engine_blocks == block_hashes(ids, PROFILE.engine.block_size)
    assert len(hashed.engine_blocks) == len(ids) // PROFILE.engine.block_size


def test_the_gateway_blocks_are_what_prepare_computes_from_the_same_estimate() -> None:
    hashed = hash_chat(MESSAGES, PROFILE, "m")
    assert hashed.gateway_blocks == prompt_blocks(canonical_prompt(MESSAGES), "m", hashed.tokens)
    assert hash_chat(MESSAGES, PROFILE, "other").gateway_blocks != hashed.gateway_blocks
