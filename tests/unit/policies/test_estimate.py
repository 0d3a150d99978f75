from __future__ import annotations

import random

from policies.estimate import FanOut, TokenEstimator
from policies.types import Usage


def test_prompt_ratio_calibrates_toward_the_models_tokenizer() -> None:
    est = TokenEstimator()
    rng = random.Random(3)
    true_ratio = 2.7  # this fake tokenizer packs fewer chars per token than the prior
    first_error = None
    for _ in range(200):
        chars = rng.randint(200, 4000)
        actual = round(chars / true_ratio)
        guess = est.prompt_tokens("m", chars)
        if first_error is None:
            first_error = abs(guess - actual) / actual
        est.observe("m", chars, Usage(actual, 10))
    late = abs(est.prompt_tokens("m", 3000) - round(3000 / true_ratio)) / round(3000 / true_ratio)
    assert first_error is not None and late < first_error / 5
    assert est.chars_per_token("other") != est.chars_per_token("m")
    err = est.error()
    assert err.observations == 200 and err.prompt_mape is not None and err.prompt_mape < first_error


def test_output_follows_flow_history_within_hard_bounds() -> None:
    est = TokenEstimator()
    flow = ("tenant", "interactive")
    cold = est.output_tokens(100, max_tokens=1000, max_model_len=None, flow=flow)
    assert cold == 1000  # nothing observed: the bound is the only evidence
    for n in [40, 50, 60, 55, 45, 52, 48, 58, 41, 300]:
        est.observe("m", 400, Usage(100, n), flow=flow)
    warm = est.output_tokens(100, max_tokens=1000, max_model_len=None, flow=flow)
    assert 58 <= warm < 1000
    assert est.output_tokens(100, max_tokens=20, max_model_len=None, flow=flow) == 20
    assert est.output_tokens(2000, max_tokens=None, max_model_len=2048, flow="new") == 48


def test_output_error_is_measured_against_actuals() -> None:
    est = TokenEstimator()
    est.observe("m", 100, Usage(25, 50), expected_output=100)
    est.observe("m", 100, Usage(25, 100), expected_output=100)
    err = est.error()
    assert err.output_mape is not None and abs(err.output_mape - 0.5) < 1e-9


def test_a_fan_out_is_charged_per_prompt_and_per_sequence() -> None:
    est = TokenEstimator()
    single = est.estimate("m", 400, max_tokens=4)
    fan = est.estimate(
        "m", 3 * 400, max_tokens=4, fan_out=FanOut(prompts=3, choices=2, generated=5)
    )
    assert fan.prompt_tokens == 3 * single.prompt_tokens  # each prompt prefilled once
    assert fan.output_tokens == 3 * 5 * single.output_tokens and fan.sequences == 15
    ids = est.estimate("m", 0, known_prompt_tokens=7, max_tokens=4)
    assert ids.prompt_tokens == 7  # token ids are counted, not sized from characters


def test_the_context_bound_holds_per_prompt() -> None:
    est = TokenEstimator()
    one = est.estimate("m", 4000, max_model_len=2048)  # 1000 prompt tokens: 1048 left
    two = est.estimate("m", 8000, max_model_len=2048, fan_out=FanOut(prompts=2))
    assert one.output_tokens == 1048 and two.output_tokens == 2 * 1048


def test_reported_usage_is_scaled_to_the_sequences_generated() -> None:
    assert FanOut(1, 2, 4).work(Usage(10, 30)) == Usage(10, 60)
    assert FanOut(3, 2, 2).work(Usage(10, 30)) == Usage(10, 30)  # all generated came back
