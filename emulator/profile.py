"""Emulator profiles: one model on one card, as YAML validated by pydantic (``extra="forbid"``).

A profile holds the engine's configuration (what vLLM takes as flags), the step-time model
(how long one engine step takes for what the batch holds) and the output-length distribution
used when a request does not pin its length with ``ignore_eos``. Shipped profiles live in
``emulator/profiles/<name>.yaml``; ``load_profile`` also accepts a path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

PROFILES_DIR = Path(__file__).parent / "profiles"

PositiveInt = Annotated[int, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StepTimeModel(_Strict):
    """Duration of one engine step, in seconds, as a linear function of the batch.

    ``duration = base_s + per_prefill_token_s * prefill_tokens
    + per_decode_seq_s * decode_seqs + per_context_token_s * context_tokens``

    ``prefill_tokens``: prompt tokens computed in the step (chunked prefill and recompute).
    ``decode_seqs``: sequences that compute exactly one new token in the step.
    ``context_tokens``: tokens already in the KV cache of every scheduled sequence (attention cost).
    """

    base_s: NonNegative
    per_prefill_token_s: NonNegative
    per_decode_seq_s: NonNegative
    per_context_token_s: NonNegative = 0.0

    def duration(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        return (
            self.base_s
            + self.per_prefill_token_s * prefill_tokens
            + self.per_decode_seq_s * decode_seqs
            + self.per_context_token_s * context_tokens
        )


class EngineConfig(_Strict):
    """The vLLM flags the engine model honours (same names as vLLM's)."""

    max_num_seqs: PositiveInt
    max_num_batched_tokens: PositiveInt
    num_gpu_blocks: PositiveInt
    block_size: PositiveInt = 16
    max_model_len: PositiveInt
    max_num_queued_reqs: int | None = Field(default=None, ge=0)
    max_num_queued_tokens: int | None = Field(default=None, ge=0)
    enable_prefix_caching: bool = True
    """vLLM V1's default: prompt blocks are cached and reused across requests."""
    step_time: StepTimeModel

    @property
    def kv_cache_size_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size

    @model_validator(mode="after")
    def _one_request_fits(self) -> EngineConfig:
        # vLLM refuses to start when one max-length sequence cannot fit in the KV cache.
        if self.kv_cache_size_tokens < self.max_model_len:
            raise ValueError(
                f"KV cache ({self.kv_cache_size_tokens} tokens) smaller than max_model_len "
                f"({self.max_model_len})"
            )
        return self


class LengthComponent(_Strict):
    """One component of the output-length mixture: a uniform integer range, inclusive."""

    weight: Annotated[float, Field(gt=0.0)]
    min_tokens: PositiveInt
    max_tokens: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> LengthComponent:
        if self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens < min_tokens")
        return self


class LengthMixture(_Strict):
    """Output lengths drawn for requests without ``ignore_eos`` (then capped by max_tokens)."""

    components: tuple[LengthComponent, ...] = Field(min_length=1)

    @property
    def mean(self) -> float:
        total = sum(c.weight for c in self.components)
        return sum(c.weight * (c.min_tokens + c.max_tokens) / 2 for c in self.components) / total


class Profile(_Strict):
    """Everything that defines one emulated vLLM instance."""

    name: str
    description: str = ""
    engine: EngineConfig
    output_lengths: LengthMixture
    chars_per_token: Annotated[float, Field(gt=0.0)] = 4.0
    """Prompt token count = ceil(characters / chars_per_token); see ``emulator.text``."""

    def count_tokens(self, chars: int) -> int:
        return max(1, math.ceil(chars / self.chars_per_token))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name (``rx9070xt``) or any YAML file by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILES_DIR / f"{name_or_path}.yaml"
    with path.open(encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return Profile.model_validate(data)


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
