"""The cached-prompt estimate: the measured hit rate of the backend a request goes to."""

from __future__ import annotations

from policies.backends import BackendView
from policies.cache_estimate import expected_hit_rate, with_cached_estimate
from policies.types import RequestInfo, WorkEstimate


def backend(name: str, rate: float | None) -> BackendView:
    return BackendView(name=name, models=frozenset({"m"}), prefix_cache_hit_rate=rate)


def req(prompt: int) -> RequestInfo:
    return RequestInfo("r", "t", "interactive", "m", WorkEstimate(prompt, 10), 0.0)


def test_the_picked_backends_rate_wins_over_the_others() -> None:
    serving = (backend("a", 0.2), backend("b", 0.6))
    assert expected_hit_rate(backend("c", 0.9), serving) == 0.9
    assert expected_hit_rate(backend("c", None), serving) == 0.0


def test_without_a_pick_the_mean_of_the_backends_that_report_one() -> None:
    serving = (backend("a", 0.2), backend("b", 0.6), backend("c", None))
    assert expected_hit_rate(None, serving) == 0.4
    assert expected_hit_rate(None, (backend("c", None),)) == 0.0
    assert expected_hit_rate(None, ()) == 0.0


def test_the_estimate_is_the_prompt_times_the_rate_rounded_down_and_bounded() -> None:
    assert with_cached_estimate(req(1000), 0.855).estimate.cached_prompt_tokens == 855
    assert with_cached_estimate(req(7), 0.5).estimate.cached_prompt_tokens == 3
    assert with_cached_estimate(req(100), 1.5).estimate.cached_prompt_tokens == 100
    assert with_cached_estimate(req(100), -0.5).estimate.cached_prompt_tokens == 0
    grown = with_cached_estimate(req(1000), 0.5)
    assert grown.estimate.computed_total == 1000 - 500 + 10
    assert grown.estimate.total == 1010 and grown.request_id == "r"


def test_no_change_hands_back_the_same_request() -> None:
    r = req(100)
    assert with_cached_estimate(r, 0.0) is r


def _model(known: dict[str, int | None]):  # type: ignore[no-untyped-def]
    return lambda b, r: known.get(b.name)


def test_the_prefix_model_wins_where_it_knows_else_the_hit_rate() -> None:
    from policies.cache_estimate import expected_cached_tokens

    a, b = backend("a", 0.5), backend("b", 0.9)
    model = _model({"a": 300, "b": None})
    assert expected_cached_tokens(req(1000), a, (), model) == 300
    assert expected_cached_tokens(req(1000), b, (), model) == 900  # knows nothing of b
    assert expected_cached_tokens(req(1000), a, (), None) == 500  # no model: the rate
    assert expected_cached_tokens(req(1000), a, (), _model({"a": 0})) == 0  # knows: none


def test_a_waiting_request_is_estimated_at_the_best_backend_the_model_knows() -> None:
    from policies.cache_estimate import expected_cached_tokens

    serving = (backend("a", 0.2), backend("b", 0.6))
    assert expected_cached_tokens(req(1000), None, serving, _model({"a": 100, "b": 700})) == 700
    assert expected_cached_tokens(req(1000), None, serving, _model({})) == 400  # mean rate


def test_counted_tokens_charge_and_correct_in_what_they_count() -> None:
    from policies.cache_estimate import counted, counted_usage
    from policies.gates.quota_params import QuotaCounts
    from policies.types import Usage

    est = WorkEstimate(1000, 10, cached_prompt_tokens=800)
    computed, prompt = QuotaCounts.COMPUTED_TOKENS, QuotaCounts.PROMPT_TOKENS
    assert counted(computed, est) == 210 and counted(prompt, est) == 1010
    assert counted_usage(computed, est, Usage(900, 20, cached_tokens=600)) == 320
    assert counted_usage(computed, est, Usage(900, 20)) == 900 - 720 + 20  # the rate, 0.8
    assert counted_usage(prompt, est, Usage(900, 20, cached_tokens=600)) == 920
