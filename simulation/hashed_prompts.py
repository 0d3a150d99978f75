"""A simulated chat prompt hashed twice, as the live path hashes it: by the engine and by
the gateway.

The engine (the emulator's server) renders the messages with the chat template, tokenizes
the text at the profile's characters per token and chains a hash per full block of its
block size (``emulator.prefix_hash``); that is what its prefix cache serves. The gateway
hashes the messages' canonical JSON in chained chunks (``policies.prompt_blocks``, the one
function both call) for the scheduler's model of each backend's cache. A simulated client
that sends messages therefore carries both, and the prefix model and the engine's cache
disagree exactly as they do live (chunk edges are not block edges).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.prefix_hash import BlockHash, block_hashes, text_token_ids
from emulator.profile import Profile
from emulator.text import chat_prompt_text
from policies.prompt_blocks import prompt_blocks
from policies.types import PromptBlocks

Message = dict[str, str]


def canonical_messages(messages: Sequence[Message]) -> bytes:
    """The messages as the gateway's ``canonical_prompt`` encodes them (sorted keys,
    compact separators, UTF-8), without its pre-built encoder."""
    text = json.dumps(list(messages), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


@dataclass(frozen=True, slots=True)
class HashedPrompt:
    tokens: int
    """The prompt's tokens as the emulator counts them."""
    engine_blocks: tuple[BlockHash, ...]
    """The engine's chained block hashes of those tokens (its prefix cache's keys)."""
    gateway_blocks: PromptBlocks
    """The gateway's chained chunk hashes of the messages (the prefix model's keys)."""


def hash_chat(messages: Sequence[Message], profile: Profile, model: str) -> HashedPrompt:
    """``messages`` as the engine of ``profile`` and a gateway serving ``model`` hash it."""
    ids = text_token_ids(chat_prompt_text(list(messages)), profile.chars_per_token)
    engine = block_hashes(ids, profile.engine.block_size)
    gateway = prompt_blocks(canonical_messages(messages), model, len(ids))
    return HashedPrompt(len(ids), engine, gateway)
