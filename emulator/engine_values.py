"""The values the engine model hands out: finished requests, step results, admission errors.

Times are seconds on the caller's clock (see ``emulator.engine``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

FINISH_LENGTH = "length"
FINISH_STOP = "stop"


class EngineBusy(Exception):
    """vLLM's admission rejection; ``reason`` is the ``admission_rejections_total`` label."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"engine busy: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """One completed request and its timestamps (seconds on the caller's clock)."""

    req_id: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    arrival: float
    scheduled_at: float
    first_token_at: float
    finished_at: float
    num_preemptions: int
    cached_tokens: int = 0
    """Prompt tokens the prefix cache served at first scheduling (``cached_tokens`` in usage)."""

    @property
    def queue_time_s(self) -> float:
        return self.scheduled_at - self.arrival

    @property
    def prefill_time_s(self) -> float:
        return self.first_token_at - self.scheduled_at

    @property
    def decode_time_s(self) -> float:
        return self.finished_at - self.first_token_at

    @property
    def inference_time_s(self) -> float:
        return self.finished_at - self.scheduled_at

    @property
    def ttft_s(self) -> float:
        return self.first_token_at - self.arrival

    @property
    def e2e_s(self) -> float:
        return self.finished_at - self.arrival

    @property
    def time_per_output_token_s(self) -> float:
        """vLLM's definition: decode time over the tokens after the first (0 for one token)."""
        return self.decode_time_s / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """Plain decode steps run back to back (``Engine.decode_ahead``): every sequence of the
    batch emitted one token per step and none finished."""

    ended_at: float
    batch: int
    """Sequences in each step (each an inter-token latency)."""
    itl_sums: tuple[float, ...]
    """Per step, the sum of its ``batch`` inter-token latencies (as ``sum`` adds a step's)."""


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one engine step did. Its outputs are stamped at ``started_at + duration_s``."""

    started_at: float
    duration_s: float
    prefill_tokens: int = 0
    decode_seqs: int = 0
    tokens_emitted: Mapping[str, int] = field(default_factory=dict)
    ttft_s: Mapping[str, float] = field(default_factory=dict)
    """Requests whose first token came in this step -> time to first token (s)."""
    new_prompt_tokens: int = 0
    """Prompt tokens of the requests whose prefill completed in this step (vLLM counts them so)."""
    new_cached_tokens: int = 0
    """Of ``new_prompt_tokens``, those the prefix cache served."""
    prefix_cache_queries: int = 0
    """Prompt tokens looked up in the prefix cache by requests admitted in this step."""
    prefix_cache_hits: int = 0
    """Of those, tokens found cached."""
    inter_token_latencies_s: tuple[float, ...] = ()
    finished: tuple[FinishedRequest, ...] = ()
    preempted: tuple[str, ...] = ()

    @property
    def ended_at(self) -> float:
        return self.started_at + self.duration_s

    @property
    def scheduled_tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs

    @property
    def first_tokens(self) -> tuple[str, ...]:
        return tuple(self.ttft_s)
