"""Turn-length mixtures (simulation/lengths.py): same mean, heavier tail, valid pieces."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from emulator.profile import load_profile
from simulation.lengths import lognormal_mixture, resolve_lengths, squared_cv
from simulation.workload import AgentWorkload

PROFILE = load_profile("rx9070xt").output_lengths


@pytest.mark.parametrize("sigma", [0.8, 1.1, 1.4])
def test_lognormal_keeps_the_profile_mean(sigma: float) -> None:
    mixture = lognormal_mixture(PROFILE.mean, sigma)
    assert mixture.mean == pytest.approx(PROFILE.mean, abs=1.0)
    assert sum(c.weight for c in mixture.components) == pytest.approx(1.0)


def test_a_larger_shape_means_a_heavier_tail() -> None:
    cvs = [squared_cv(lognormal_mixture(PROFILE.mean, s)) for s in (0.8, 1.1, 1.4)]
    assert cvs == sorted(cvs)
    heavy = lognormal_mixture(PROFILE.mean, 1.1)
    assert squared_cv(heavy) > squared_cv(PROFILE)
    longest = max(c.max_tokens for c in PROFILE.components)
    assert sum(c.weight for c in heavy.components if c.min_tokens >= longest) > 0.0


def test_the_median_is_the_lognormal_median() -> None:
    sigma = 1.1
    mixture = lognormal_mixture(PROFILE.mean, sigma)
    below = 0.0
    for c in mixture.components:
        if below >= 0.5 - 1e-9:
            median = c.min_tokens
            break
        below += c.weight
    assert median == pytest.approx(PROFILE.mean * math.exp(-sigma * sigma / 2), rel=0.05)


def test_draws_follow_the_mixture_mean() -> None:
    workload = AgentWorkload(resolve_lengths("lognormal-1.1", PROFILE))
    rng = random.Random(7)
    draws = [workload.output_tokens(rng) for _ in range(40_000)]
    assert sum(draws) / len(draws) == pytest.approx(PROFILE.mean, rel=0.03)


def test_names_and_files_resolve(tmp_path: Path) -> None:
    assert resolve_lengths("profile", PROFILE) is PROFILE
    path = tmp_path / "lengths.yaml"
    path.write_text("components:\n  - {weight: 1, min_tokens: 10, max_tokens: 30}\n")
    assert resolve_lengths(str(path), PROFILE).mean == pytest.approx(20.0)
    with pytest.raises(ValueError, match="unknown lengths"):
        resolve_lengths("nope", PROFILE)
