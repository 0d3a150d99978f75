"""The engine's parameters: the defaults are the values docs/policies.md documents, and each
bound refuses the value at (or just past) its edge and accepts the one just inside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from policies.engine.headroom_params import HeadroomParams
from policies.engine.prefill_backlog_params import PrefillBacklogParams
from policies.engine.queue_params import QueueParams
from policies.engine.retry_after_params import RetryAfterParams

DOC = Path(__file__).resolve().parents[4] / "docs" / "policies.md"
MODELS: dict[str, type[pydantic.BaseModel]] = {
    "queue": QueueParams,
    "retry_after": RetryAfterParams,
    "headroom": HeadroomParams,
    "prefill_backlog": PrefillBacklogParams,
}


def _documented() -> dict[str, Any]:
    """The example ``policy:`` section of docs/policies.md (every key at its default)."""
    text = DOC.read_text()
    start = text.index("```yaml\npolicy:") + len("```yaml\n")
    return yaml.safe_load(text[start : text.index("```", start)])["policy"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("section", list(MODELS))
def test_the_defaults_are_the_documented_values(section: str) -> None:
    documented = dict(_documented()[section])
    documented.pop("discipline", None)  # a plugin of its own
    assert MODELS[section]().model_dump() == documented


@pytest.mark.parametrize(
    ("model", "field", "refused", "accepted"),
    [
        (QueueParams, "max_wait_s", 0.0, 0.5),
        (QueueParams, "max_queued_tokens", 0, 1),
        (RetryAfterParams, "min_s", 0.0, 0.25),
        (RetryAfterParams, "max_s", 0.0, 0.5),
        (RetryAfterParams, "jitter", -0.01, 0.0),
        (RetryAfterParams, "jitter", 1.01, 1.0),
        (HeadroomParams, "reserve_fraction", -0.01, 0.0),
        (HeadroomParams, "reserve_fraction", 1.0, 0.99),
        (HeadroomParams, "active_window_s", 0.0, 0.5),
        (PrefillBacklogParams, "ttft_target_s", 0.0, 0.01),
        (PrefillBacklogParams, "half_life_s", 0.0, 0.5),
    ],
)
def test_each_bound_at_its_edge(
    model: type[pydantic.BaseModel], field: str, refused: float, accepted: float
) -> None:
    with pytest.raises(pydantic.ValidationError):
        model(**{field: refused})
    assert getattr(model(**{field: accepted}), field) == accepted


def test_retry_after_max_may_equal_min_but_not_go_below() -> None:
    assert RetryAfterParams(min_s=2.0, max_s=2.0).max_s == 2.0
    with pytest.raises(pydantic.ValidationError):
        RetryAfterParams(min_s=2.0, max_s=1.99)
