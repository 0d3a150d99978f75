"""Turn-length mixtures for the agent workload (output tokens per turn).

The reference states only the mean turn (354 tokens; docs/seed-table.md).
``profile`` uses the emulator profile's
mixture (rx9070xt: 50 % 16-204, 35 % 200-600, 15 % 600-1520; squared coefficient of
variation about 0.97, longest turn 1520). ``lognormal-S`` is a heavier-tailed coding-turn
mixture: a lognormal with shape ``sigma = S`` and the profile's mean, cut at its
10 %, 20 %, ..., 90 %, 95 % and 99 % quantiles into uniform pieces (the emulator's mixture
format, so the emulator and the swarm serve the very same turns); the last piece is as
wide as the lognormal's upper 1 % conditional mean implies. Bounds are then scaled so the
mixture's mean is the profile's (354 for rx9070xt) to within a token.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from statistics import NormalDist

import yaml

from emulator.profile import LengthComponent, LengthMixture

QUANTILE_CUTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
"""Where the lognormal is cut into uniform pieces (cumulative probability)."""


def lognormal_mixture(mean_tokens: float, sigma: float) -> LengthMixture:
    """A piecewise-uniform lognormal with shape ``sigma`` and mean ``mean_tokens``."""
    unit = NormalDist()
    mu = math.log(mean_tokens) - sigma * sigma / 2.0
    edges = [1.0] + [math.exp(mu + sigma * unit.inv_cdf(p)) for p in QUANTILE_CUTS[1:-1]]
    tail_p = 1.0 - QUANTILE_CUTS[-2]
    tail_mean = mean_tokens * (1.0 - unit.cdf(unit.inv_cdf(QUANTILE_CUTS[-2]) - sigma)) / tail_p
    edges.append(2.0 * tail_mean - edges[-1])
    weights = [b - a for a, b in itertools.pairwise(QUANTILE_CUTS)]
    pieces = list(zip(weights, edges, edges[1:], strict=False))
    raw_mean = sum(w * (lo + hi) / 2.0 for w, lo, hi in pieces)
    scale = mean_tokens / raw_mean
    return LengthMixture(
        components=tuple(
            LengthComponent(
                weight=w,
                min_tokens=max(1, round(lo * scale)),
                max_tokens=max(1, round(hi * scale)),
            )
            for w, lo, hi in pieces
        )
    )


def resolve_lengths(name_or_path: str, profile_mixture: LengthMixture) -> LengthMixture:
    """``profile``, ``lognormal-S`` (same mean as the profile) or a YAML file holding
    ``components:`` in the emulator profile's format."""
    if name_or_path == "profile":
        return profile_mixture
    if name_or_path.startswith("lognormal-"):
        sigma = float(name_or_path.removeprefix("lognormal-"))
        return lognormal_mixture(profile_mixture.mean, sigma)
    path = Path(name_or_path)
    if not path.exists():
        raise ValueError(f"unknown lengths {name_or_path!r}: profile, lognormal-S or a file")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return LengthMixture.model_validate(data.get("output_lengths", data))


def squared_cv(mixture: LengthMixture) -> float:
    """Squared coefficient of variation of the mixture's lengths (variance / mean^2)."""
    total = sum(c.weight for c in mixture.components)
    second = sum(
        c.weight * (c.min_tokens**2 + c.min_tokens * c.max_tokens + c.max_tokens**2) / 3.0
        for c in mixture.components
    )
    mean = mixture.mean
    return (second / total - mean * mean) / (mean * mean)
