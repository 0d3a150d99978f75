"""Multi-turn agent conversations: every turn resends the whole conversation so far.

An agent opens with its own system prompt (``system_words`` words) and a first user message;
each later turn appends the assistant's reply and a new user message of ``turn_words``
words, so the prompt grows every turn and all but its tail was already sent. After
``turns_per_conversation`` turns the agent starts over with the same system prompt (a new
task for the same agent, its context near the model's length). Agents are spread over
``tenants`` round-robin. Texts are seeded words, the same for every engine that serves them,
so the emulator, the simulator and a real vLLM see the very same prompts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from emulator.profile import Profile
from emulator.text import reply_text
from policies.types import PromptBlocks
from simulation.hashed_prompts import HashedPrompt, hash_chat

Message = dict[str, str]

_SOURCE = (
    "the gate holds a steady flow of tokens for every tenant while agents call tools read "
    "files write patches and run tests on the build server before they report back with a "
    "summary of what changed and why it matters to the next step in the plan"
)
VOCABULARY = tuple(_SOURCE.split())


@dataclass(frozen=True, slots=True)
class ConversationShape:
    """The traffic: closed-loop agents in tenants, prompts that grow every turn."""

    agents: int = 8
    tenants: int = 2
    system_words: int = 450
    turn_words: int = 70
    output_tokens: int = 48
    turns_per_conversation: int = 7
    """Turns before an agent starts over (7 keeps the tiny model's 2,048 tokens in reach)."""
    think_mean_s: float = 1.0
    """Exponential think time between an answer and the next turn, in seconds."""
    seed: int = 0

    def tenant_of(self, agent: int) -> str:
        return f"tenant-{agent % self.tenants}"


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(n))


@dataclass(slots=True)
class Conversation:
    """One agent's conversation; ``messages`` is the next turn's prompt."""

    shape: ConversationShape
    agent: int
    messages: list[Message] = field(default_factory=list)
    turn: int = 0
    _rng: random.Random = field(init=False)
    _system: str = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"{self.shape.seed}/{self.agent}")
        self._system = f"Agent {self.agent}. " + _words(self._rng, self.shape.system_words)
        self._start()

    @property
    def tenant(self) -> str:
        return self.shape.tenant_of(self.agent)

    def _user(self) -> Message:
        return {"role": "user", "content": _words(self._rng, self.shape.turn_words)}

    def _start(self) -> None:
        self.messages = [{"role": "system", "content": self._system}, self._user()]
        self.turn = 0

    def answered(self, reply: str) -> None:
        """The turn came back with ``reply``: the next prompt carries it and one more ask."""
        self.turn += 1
        if self.turn >= self.shape.turns_per_conversation:
            self._start()
            return
        self.messages += [{"role": "assistant", "content": reply}, self._user()]

    def think_s(self) -> float:
        return self._rng.expovariate(1.0 / self.shape.think_mean_s)


def conversations(shape: ConversationShape) -> list[Conversation]:
    return [Conversation(shape, agent) for agent in range(shape.agents)]


class ConversationPrompts:
    """The simulator's prompts (``simulation.core.Prompts``): each agent's conversation as
    the emulator's server would tokenize it, replies being the emulator's own filler text,
    and as a gateway serving ``model`` would hash it (``gateway_blocks``)."""

    def __init__(self, shape: ConversationShape, profile: Profile, model: str) -> None:
        self.shape = shape
        self._conversations = conversations(shape)
        self._profile, self._model = profile, model
        self._next: dict[int, HashedPrompt] = {}

    def _hashed(self, agent: int) -> HashedPrompt:
        known = self._next.get(agent)
        if known is None:
            messages = self._conversations[agent].messages
            known = self._next[agent] = hash_chat(messages, self._profile, self._model)
        return known

    def prompt(self, agent: int) -> tuple[int, tuple[bytes, ...]]:
        hashed = self._hashed(agent)
        return hashed.tokens, hashed.engine_blocks

    def gateway_blocks(self, session: str) -> PromptBlocks:
        """The gateway's chunk hashes of session ``agent-N``'s next turn."""
        return self._hashed(int(session.rsplit("-", 1)[1])).gateway_blocks

    def answered(self, agent: int, output_tokens: int) -> None:
        self._next.pop(agent, None)
        self._conversations[agent].answered(reply_text(output_tokens))

    def tenant_of(self, session: str) -> str:
        """The tenant of session ``agent-N`` (the simulator's session ids)."""
        return self.shape.tenant_of(int(session.rsplit("-", 1)[1]))
