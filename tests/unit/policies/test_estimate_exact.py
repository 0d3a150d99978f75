"""``TokenEstimator`` to the token, with the defaults the gateway runs (``TokenEstimator()``):
4 characters a token until a model's ratio is learned, the EWMA step of 0.1, the 0.9 quantile
of a flow's last 64 outputs once it has 5, 256 output tokens without evidence, 10 000 flows
remembered. Prompts, bounds and fan-outs differ in every number the estimate reads."""

from __future__ import annotations

from policies.estimate import SINGLE, FanOut, TokenEstimator
from policies.types import Usage, WorkEstimate


def warm(
    est: TokenEstimator, flow: object, outputs: list[int], sequences: int | None = None
) -> None:
    """Outputs observed on ``flow`` (``sequences`` None: the default, one)."""
    for n in outputs:
        if sequences is None:
            est.observe("m", 0, Usage(0, n), flow=flow)
        else:
            est.observe("m", 0, Usage(0, n), flow=flow, sequences=sequences)


def out(est: TokenEstimator, flow: str | None, bound: int | None = None) -> int:
    return est.output_tokens(10, max_tokens=bound, max_model_len=None, flow=flow)


def test_the_default_ratio_is_four_characters_and_a_prompt_is_at_least_one_token() -> None:
    est = TokenEstimator()
    assert est.chars_per_token("m") == 4.0
    assert [est.prompt_tokens("m", c) for c in (0, 1, 400, 401)] == [1, 1, 100, 101]


def test_the_ratio_is_learned_per_model_by_an_ewma_of_step_alpha() -> None:
    est = TokenEstimator()
    est.observe("m", 300, Usage(100, 5))  # first observation: taken as it is
    assert est.chars_per_token("m") == 3.0
    est.observe("m", 500, Usage(100, 5))  # 3 + 0.1 x (5 - 3)
    assert est.chars_per_token("m") == 3.0 + 0.1 * (5.0 - 3.0)
    assert est.chars_per_token("other") == 4.0
    est.observe("other", 0, Usage(100, 5))  # no characters: nothing to learn from
    est.observe("other", 500, Usage(0, 5))  # no prompt tokens reported: same
    assert est.chars_per_token("other") == 4.0 and est.error().observations == 2
    est = TokenEstimator(chars_per_token=2.0, alpha=0.5)
    est.observe("m", 100, Usage(25, 5))
    est.observe("m", 100, Usage(50, 5))
    assert est.chars_per_token("m") == 3.0  # 4 + 0.5 x (2 - 4)
    est.observe("one", 1, Usage(1, 5))  # the smallest evidence still counts
    assert est.chars_per_token("one") == 1.0


def test_the_prompt_error_is_measured_before_the_update() -> None:
    est = TokenEstimator()
    assert est.error().prompt_mape is None and est.error().output_mape is None
    est.observe("m", 400, Usage(80, 5))  # estimated 100 at 4 chars a token: 25 % off
    est.observe("m", 300, Usage(100, 5))  # estimated 300 / 5 = 60: 40 % off
    err = est.error()
    assert err.observations == 2 and err.prompt_mape == (0.25 + 0.4) / 2
    est.observe("m", 100, Usage(10, 40), expected_output=50)  # 25 % off
    est.observe("m", 100, Usage(10, 0), expected_output=50)  # nothing generated: not counted
    assert est.error().output_mape == 0.25
    est.observe("m", 100, Usage(10, 1), expected_output=2)  # one token: 100 % off
    assert est.error().output_mape == (0.25 + 1.0) / 2


def test_without_evidence_the_output_is_the_bound_else_256() -> None:
    est = TokenEstimator()
    assert out(est, None) == 256 and out(est, "f") == 256
    assert out(est, "f", 300) == 300
    assert est.output_tokens(900, max_tokens=300, max_model_len=1000, flow=None) == 100
    assert est.output_tokens(900, max_tokens=50, max_model_len=1000, flow=None) == 50
    assert est.output_tokens(1200, max_tokens=None, max_model_len=1000, flow=None) == 1
    assert est.output_tokens(10, max_tokens=0, max_model_len=None, flow=None) == 256  # unset
    assert TokenEstimator(default_output_tokens=7).output_tokens(10, None, None, None) == 7


def test_a_flow_needs_five_outputs_and_then_gives_their_upper_decile() -> None:
    est = TokenEstimator()
    warm(est, "f", [10, 20, 30, 40])
    assert out(est, "f") == 256  # four: not yet
    warm(est, "f", [50])
    assert out(est, "f") == 50  # ceil(0.9 x 5) - 1 = index 4 of 5
    warm(est, "f", [60, 70, 80, 90, 100])
    assert out(est, "f") == 90  # ceil(0.9 x 10) - 1 = index 8 of 10
    assert out(est, "f", 85) == 85 and out(est, "f", 95) == 90
    warm(est, "f", [5])  # a new sample invalidates the cached quantile
    assert out(est, "f") == 90  # index ceil(9.9) - 1 = 9 of 11: [5, 10, ..., 90, 100]
    warm(est, "zeros", [0] * 5)
    assert out(est, "zeros") == 1  # never below one token


def test_a_flow_remembers_its_last_64_outputs() -> None:
    est = TokenEstimator()
    warm(est, "f", [1000] * 7 + [10] * 57)
    assert out(est, "f") == 1000  # 7 of 64 above index 57
    warm(est, "f", [10])  # the oldest 1000 drops out: 6 of 64
    assert out(est, "f") == 10


def test_a_flow_learns_the_output_per_sequence() -> None:
    est = TokenEstimator()
    warm(est, "f", [31] * 5, sequences=3)  # ceil(31 / 3)
    assert out(est, "f") == 11
    warm(est, "g", [31] * 5, sequences=0)  # no sequence count: taken as one
    assert out(est, "g") == 31


def test_the_least_recently_used_flow_is_forgotten_past_max_flows() -> None:
    est = TokenEstimator(max_flows=2)
    warm(est, "a", [100] * 5)
    warm(est, "b", [200] * 5)
    warm(est, "a", [100])  # a is used again: b is now the oldest
    warm(est, "c", [300] * 5)
    assert (out(est, "a"), out(est, "b"), out(est, "c")) == (100, 256, 300)
    est = TokenEstimator()
    for i in range(10_001):
        est.observe("m", 0, Usage(0, 5), flow=i)
    assert out(est, 10_000) == 256  # one sample only
    warm(est, 1, [7] * 4)  # flow 1 was kept: its first sample and four more
    assert out(est, 1) == 7
    warm(est, 0, [7] * 4)  # flow 0 was forgotten: four new samples are not five
    assert out(est, 0) == 256


def test_the_estimate_sums_characters_and_known_tokens_and_bounds_each_prompt() -> None:
    est = TokenEstimator()
    assert est.estimate("m", 400, known_prompt_tokens=7, max_tokens=9) == WorkEstimate(107, 9)
    assert est.estimate("m", 0, max_tokens=9) == WorkEstimate(1, 9)
    assert est.estimate("m", 0, known_prompt_tokens=1, max_tokens=9) == WorkEstimate(1, 9)
    assert est.estimate("m", 1, known_prompt_tokens=7, max_tokens=9) == WorkEstimate(8, 9)
    three = est.estimate("m", 0, max_tokens=9, fan_out=FanOut(prompts=3))
    assert three == WorkEstimate(3, 27, 3)  # at least a token a prompt
    # 1000 prompt tokens over 3 prompts: 334 each, so 1000 - 334 = 666 left per sequence
    bounded = est.estimate("m", 4000, max_model_len=1000, fan_out=FanOut(3, 1, 2))
    assert bounded == WorkEstimate(1000, 666 * 6, 6)
    assert est.estimate("m", 400) == WorkEstimate(100, 256)


def test_reported_usage_is_scaled_up_by_the_sequences_not_returned() -> None:
    assert SINGLE.work(Usage(10, 30)) == Usage(10, 30)
    assert (SINGLE.prompts, SINGLE.choices, SINGLE.generated, SINGLE.sequences) == (1, 1, 1, 1)
    assert FanOut(2, 3, 4).work(Usage(10, 5)) == Usage(10, 7)  # ceil(5 x 4 / 3)
    assert FanOut(2, 3, 4).sequences == 8
