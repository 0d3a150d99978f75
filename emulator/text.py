"""What the emulator reads from an OpenAI request and the text it writes back.

Prompt tokens are a deterministic count, not a tokenizer: ``ceil(chars / chars_per_token)``
(profile default 4) over the prompt as a chat template would render it. A chat message counts
as ``<|role|>\\n{content}\\n`` and the prompt ends with ``<|assistant|>\\n`` (the template of
the project's random-weight models); text parts of list contents are concatenated. A
completions prompt given as token ids counts one token per id.

Output length: ``ignore_eos`` gives exactly ``max_tokens`` (finish ``length``). Otherwise a
length is drawn from the profile's mixture with a seeded RNG; a draw at or above ``max_tokens``
is cut there (``length``), a shorter one ends as if on EOS (``stop``). ``max_tokens`` defaults
to what is left of ``max_model_len``, as in vLLM. The text is filler words, one per token.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from emulator.engine import FINISH_LENGTH, FINISH_STOP
from emulator.prefix_hash import text_token_ids
from emulator.profile import LengthMixture, Profile

_WORDS = (" the", " flow", " of", " tokens", " is", " steady", " and", " the", " gate", " holds")


class InvalidRequest(ValueError):
    """A request vLLM would answer with 400; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class Plan:
    """What the engine will do with one request."""

    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    finish_reason: str


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    raise InvalidRequest("message content must be a string or a list of parts", "messages")


def chat_prompt_text(messages: Any) -> str:
    """The prompt as the chat template renders it."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty list", "messages")
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise InvalidRequest("each message needs a role", "messages")
        parts.append(f"<|{message['role']}|>\n{_content_text(message.get('content'))}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def prompt_token_ids(body: dict[str, Any], chat: bool, profile: Profile) -> list[int]:
    """The emulator's token ids of the request's prompt (``emulator.prefix_hash``)."""
    if chat:
        return text_token_ids(chat_prompt_text(body.get("messages")), profile.chars_per_token)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return text_token_ids(prompt, profile.chars_per_token)
    raise InvalidRequest("prompt must be a string, one string in a list, or token ids", "prompt")


def draw_length(mixture: LengthMixture, rng: random.Random) -> int:
    weights = [c.weight for c in mixture.components]
    component = rng.choices(mixture.components, weights=weights)[0]
    return rng.randint(component.min_tokens, component.max_tokens)


def plan_request(
    body: dict[str, Any], prompt_tokens: int, profile: Profile, rng: random.Random
) -> Plan:
    """Validate lengths like vLLM and decide the output length."""
    limit = profile.engine.max_model_len
    if prompt_tokens >= limit:
        raise InvalidRequest(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {prompt_tokens} input tokens, which exceeds this limit even without any "
            "output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
        )
    requested = body.get("max_completion_tokens", body.get("max_tokens"))
    if requested is None:
        max_tokens = limit - prompt_tokens
    elif not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
        raise InvalidRequest("max_tokens must be a positive integer", "max_tokens")
    elif prompt_tokens + requested > limit:
        raise InvalidRequest(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{requested} output tokens and your prompt contains {prompt_tokens} input tokens, "
            f"for a total of {prompt_tokens + requested} tokens.",
            "max_tokens",
        )
    else:
        max_tokens = requested
    if body.get("ignore_eos"):
        return Plan(prompt_tokens, max_tokens, max_tokens, FINISH_LENGTH)
    drawn = draw_length(profile.output_lengths, rng)
    if drawn >= max_tokens:
        return Plan(prompt_tokens, max_tokens, max_tokens, FINISH_LENGTH)
    return Plan(prompt_tokens, drawn, max_tokens, FINISH_STOP)


def token_text(index: int) -> str:
    """The text of the ``index``-th output token of any request."""
    return _WORDS[index % len(_WORDS)]


def reply_text(output_tokens: int) -> str:
    """The whole text of an answer of ``output_tokens`` tokens (its first ones, for an
    answer cut short)."""
    return "".join(token_text(i) for i in range(output_tokens))
