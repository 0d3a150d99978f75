"""``TokenEstimator``: the cost of a request in tokens, before any backend work.

Prompt tokens come from the character count divided by a chars-per-token ratio learned per
model from the ``usage.prompt_tokens`` vLLM returns (an EWMA). Output tokens are bounded by
``max_tokens`` and by the context left (``max_model_len - prompt``), and otherwise follow
the flow's own history: a high quantile of its recent output lengths.

A request that fans out (``FanOut``: a list of prompts, ``n`` choices, ``best_of``) is
charged at its real multiplicity: prompt tokens summed over its prompts, output tokens per
sequence times the sequences it generates. Flow history keeps per-sequence output lengths.

The gateway owns one instance (it is stateful) and reports actual usage back through
``observe``. Errors are measured out of sample (the estimate made before the update).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass

from policies.types import Usage, WorkEstimate


@dataclass(frozen=True, slots=True)
class FanOut:
    """The sequences one request makes: ``prompts`` (a completion's list of prompts), times
    ``generated`` per prompt (``max(n, best_of)``), of which ``choices`` (``n``) come back."""

    prompts: int = 1
    choices: int = 1
    generated: int = 1

    @property
    def sequences(self) -> int:
        """Sequences generated: what the engine works on."""
        return self.prompts * self.generated

    def work(self, usage: Usage) -> Usage:
        """Reported ``usage`` (vLLM sums the prompts once each, and the returned choices)
        scaled to the sequences generated, so it compares with the estimate."""
        if self.generated == self.choices:
            return usage
        completion = math.ceil(usage.completion_tokens * self.generated / self.choices)
        return Usage(usage.prompt_tokens, completion)


SINGLE = FanOut()
"""One prompt, one choice: a request that does not fan out."""


@dataclass(frozen=True, slots=True)
class EstimatorError:
    """Mean absolute percentage errors (0.1 = 10 %) over all observations, and counts."""

    prompt_mape: float | None
    output_mape: float | None
    observations: int


class _FlowHistory:
    __slots__ = ("quantile_cache", "samples")

    def __init__(self, size: int) -> None:
        self.samples: deque[int] = deque(maxlen=size)
        self.quantile_cache: int | None = None


class TokenEstimator:
    def __init__(
        self,
        *,
        chars_per_token: float = 4.0,
        alpha: float = 0.1,
        output_quantile: float = 0.9,
        history: int = 64,
        min_history: int = 5,
        max_flows: int = 10_000,
        default_output_tokens: int = 256,
    ) -> None:
        self._initial_ratio = chars_per_token
        self._alpha = alpha
        self._quantile = output_quantile
        self._history = history
        self._min_history = min_history
        self._max_flows = max_flows
        self._default_output = default_output_tokens
        self._ratio: dict[str, float] = {}
        self._flows: OrderedDict[Hashable, _FlowHistory] = OrderedDict()
        self._prompt_err = _MeanAbsError()
        self._output_err = _MeanAbsError()

    def chars_per_token(self, model: str) -> float:
        return self._ratio.get(model, self._initial_ratio)

    def prompt_tokens(self, model: str, prompt_chars: int) -> int:
        return max(1, math.ceil(prompt_chars / self.chars_per_token(model)))

    def estimate(
        self,
        model: str,
        prompt_chars: int,
        *,
        max_tokens: int | None = None,
        max_model_len: int | None = None,
        flow: Hashable | None = None,
        fan_out: FanOut = SINGLE,
        known_prompt_tokens: int = 0,
    ) -> WorkEstimate:
        """``prompt_chars`` are sized by the learned ratio; ``known_prompt_tokens`` (token-id
        prompts) are counted as they are. The context bound holds per prompt."""
        prompt = known_prompt_tokens
        if prompt_chars > 0 or prompt == 0:
            prompt += self.prompt_tokens(model, prompt_chars)
        prompt = max(prompt, fan_out.prompts)
        per_prompt = math.ceil(prompt / fan_out.prompts)
        output = self.output_tokens(per_prompt, max_tokens, max_model_len, flow)
        return WorkEstimate(prompt, output * fan_out.sequences, fan_out.sequences)

    def output_tokens(
        self,
        prompt_tokens: int,
        max_tokens: int | None,
        max_model_len: int | None,
        flow: Hashable | None,
    ) -> int:
        """Expected output: the flow's high quantile, never above the hard bounds."""
        bounds = [b for b in (max_tokens, _context_left(max_model_len, prompt_tokens)) if b]
        bound = min(bounds) if bounds else None
        observed = self._flow_quantile(flow)
        if observed is None:
            return bound if bound is not None else self._default_output
        return observed if bound is None else min(bound, observed)

    def observe(
        self,
        model: str,
        prompt_chars: int,
        usage: Usage,
        *,
        flow: Hashable | None = None,
        expected_output: int | None = None,
        sequences: int = 1,
    ) -> None:
        """Learn from one completed request's actual ``usage``, summed over the ``sequences``
        it generated (``FanOut.work``): the flow learns the length per sequence."""
        if usage.prompt_tokens > 0 and prompt_chars > 0:
            self._prompt_err.add(self.prompt_tokens(model, prompt_chars), usage.prompt_tokens)
            ratio = prompt_chars / usage.prompt_tokens
            old = self._ratio.get(model)
            self._ratio[model] = ratio if old is None else old + self._alpha * (ratio - old)
        if expected_output is not None and usage.completion_tokens > 0:
            self._output_err.add(expected_output, usage.completion_tokens)
        if flow is not None:
            hist = self._flow(flow)
            hist.samples.append(math.ceil(usage.completion_tokens / max(1, sequences)))
            hist.quantile_cache = None

    def error(self) -> EstimatorError:
        return EstimatorError(self._prompt_err.mean(), self._output_err.mean(), self._prompt_err.n)

    def _flow(self, flow: Hashable) -> _FlowHistory:
        hist = self._flows.get(flow)
        if hist is None:
            hist = self._flows[flow] = _FlowHistory(self._history)
            if len(self._flows) > self._max_flows:
                self._flows.popitem(last=False)
        else:
            self._flows.move_to_end(flow)
        return hist

    def _flow_quantile(self, flow: Hashable | None) -> int | None:
        hist = None if flow is None else self._flows.get(flow)
        if hist is None or len(hist.samples) < self._min_history:
            return None
        if hist.quantile_cache is None:
            ordered = sorted(hist.samples)
            idx = min(len(ordered) - 1, math.ceil(self._quantile * len(ordered)) - 1)
            hist.quantile_cache = max(1, ordered[idx])
        return hist.quantile_cache


def _context_left(max_model_len: int | None, prompt_tokens: int) -> int | None:
    if max_model_len is None:
        return None
    return max(1, max_model_len - prompt_tokens)


class _MeanAbsError:
    __slots__ = ("n", "total")

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0

    def add(self, estimated: int, actual: int) -> None:
        self.n += 1
        self.total += abs(estimated - actual) / actual

    def mean(self) -> float | None:
        return None if self.n == 0 else self.total / self.n
