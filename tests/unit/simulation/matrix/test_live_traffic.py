"""The live clients' prompts, as the emulator counts and caches them."""

from __future__ import annotations

import pytest

from emulator.profile import load_profile
from emulator.text import chat_prompt_text, prompt_token_ids
from simulation.matrix.live_traffic import prompt_messages

PROFILE = load_profile("cpu-tiny")


def _tokens(messages: list[dict[str, str]]) -> int:
    return len(prompt_token_ids({"messages": messages}, True, PROFILE))


@pytest.mark.parametrize("tokens", [7, 50, 64, 1500, 3000])
def test_a_first_prompt_is_exactly_its_tokens_in_the_emulator(tokens: int) -> None:
    assert _tokens(prompt_messages([], tokens)) == tokens


def test_a_later_turn_holds_the_earlier_turns_as_a_prefix_and_is_exactly_its_tokens() -> None:
    first = prompt_messages([], 256)
    history = [*first, {"role": "assistant", "content": "word " * 100}]
    later = prompt_messages(history, 256 + 100 + 64)
    assert _tokens(later) == 256 + 100 + 64
    assert later[: len(history)] == history
    assert chat_prompt_text(later).startswith(chat_prompt_text(first))


def test_a_history_longer_than_the_prompt_is_dropped() -> None:
    history = [{"role": "user", "content": "x" * 4000}]
    messages = prompt_messages(history, 300)
    assert len(messages) == 1 and _tokens(messages) == 300


def test_two_requests_tagged_apart_share_no_prefix_block() -> None:
    a = prompt_messages([], 1500, "victim client 0 request 1: ")
    b = prompt_messages([], 1500, "victim client 1 request 2: ")
    ids_a = prompt_token_ids({"messages": a}, True, PROFILE)
    ids_b = prompt_token_ids({"messages": b}, True, PROFILE)
    assert len(ids_a) == len(ids_b) == 1500
    assert ids_a[:128] != ids_b[:128]  # the first block (cpu-tiny's block size) differs
