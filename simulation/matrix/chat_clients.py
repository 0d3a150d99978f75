"""The chat messages a matrix client sends when its tenant's prompts are hashed
(``Shape.hashed``): what the engine's prefix cache and the gateway's prefix model see.

A client's first turn is an ask of the shape's ``prompt_tokens``; each later turn of its
conversation resends everything so far, plus the engine's answer (the emulator's own
reply text) and a question of ``question_tokens``; a new conversation starts a new ask.
Texts are seeded words, each client's its own, sized so that the emulator counts the
first ask at exactly ``prompt_tokens`` (the chat template's markers included). When the
conversation outgrows the model, the client drops its oldest answer and question (the
first ask stays), so the prefix after the ask is sent anew.
"""

from __future__ import annotations

import random

from emulator.profile import Profile
from emulator.text import chat_prompt_text, reply_text
from simulation.conversations import VOCABULARY
from simulation.hashed_prompts import HashedPrompt, Message, hash_chat
from simulation.matrix.traffic import Shape


def ask_room(messages: list[Message], total_chars: int) -> int:
    """Characters left for the text of one more user message after ``messages`` when the
    rendered chat (``emulator.text.chat_prompt_text``: the template's markers and the
    assistant's opening included) is to be ``total_chars`` long; negative when ``messages``
    alone leave no room."""
    return total_chars - len(chat_prompt_text([*messages, {"role": "user", "content": ""}]))


class ChatClient:
    """One closed-loop client's conversation, as messages."""

    def __init__(self, shape: Shape, profile: Profile, model: str, seed: str) -> None:
        self._shape, self._profile, self._model = shape, profile, model
        self._rng = random.Random(seed)
        self._cpt = profile.chars_per_token
        self.messages: list[Message] = []

    def start(self) -> None:
        """A new conversation: one ask of ``prompt_tokens`` (template included)."""
        room = ask_room([], round(self._shape.prompt_tokens * self._cpt))
        self.messages = [{"role": "user", "content": self._words(room)}]

    def answered(self, output_tokens: int) -> None:
        """The last turn came back: the next carries its answer and one more question."""
        reply = reply_text(output_tokens)
        before = len(chat_prompt_text(self.messages)) + len(reply)
        self.messages.append({"role": "assistant", "content": reply})
        room = ask_room(self.messages, before + round(self._shape.question_tokens * self._cpt))
        self.messages.append({"role": "user", "content": self._words(room)})

    def continued(self, received: int) -> HashedPrompt:
        """The prompt that asks for the rest of an answer cut short after ``received``
        tokens: this turn's messages and the answer so far."""
        partial = {"role": "assistant", "content": reply_text(received)}
        return hash_chat([*self.messages, partial], self._profile, self._model)

    def prompt(self, max_tokens: int) -> HashedPrompt:
        """The next turn's prompt, its oldest turns dropped until it has at most
        ``max_tokens`` tokens (the first ask is never dropped)."""
        while (
            len(self.messages) > 2 and len(chat_prompt_text(self.messages)) / self._cpt > max_tokens
        ):
            del self.messages[1:3]
        return hash_chat(self.messages, self._profile, self._model)

    def _words(self, chars: int) -> str:
        """Seeded words of ``chars`` characters (at least one)."""
        size = max(1, chars)
        words: list[str] = []
        length = -1
        while length < size:
            word = self._rng.choice(VOCABULARY)
            words.append(word)
            length += len(word) + 1
        return " ".join(words)[:size]
