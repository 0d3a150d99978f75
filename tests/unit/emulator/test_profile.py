"""Profiles: shipped ones load, typos are refused, the length mixture draws what it says."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from emulator.profile import PROFILES_DIR, load_profile, shipped_profiles
from emulator.text import draw_length


@pytest.mark.parametrize("name", shipped_profiles())
def test_shipped_profiles_load(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.engine.kv_cache_size_tokens >= profile.engine.max_model_len


def test_an_unknown_key_is_an_error(tmp_path: Path) -> None:
    data = yaml.safe_load((PROFILES_DIR / "rx9070xt.yaml").read_text(encoding="utf-8"))
    data["engine"]["max_num_seq"] = 4  # typo of max_num_seqs
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValidationError, match="max_num_seq"):
        load_profile(path)


def test_a_kv_cache_smaller_than_one_sequence_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((PROFILES_DIR / "cpu-medium.yaml").read_text(encoding="utf-8"))
    data["engine"]["num_gpu_blocks"] = 1
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ValidationError, match="max_model_len"):
        load_profile(path)


def test_length_draws_have_the_mixture_mean_and_stay_in_range() -> None:
    mixture = load_profile("rx9070xt").output_lengths
    rng = random.Random(5)
    draws = [draw_length(mixture, rng) for _ in range(20_000)]
    assert sum(draws) / len(draws) == pytest.approx(mixture.mean, rel=0.03)
    assert min(draws) >= min(c.min_tokens for c in mixture.components)
    assert max(draws) <= max(c.max_tokens for c in mixture.components)
