"""``evaluate-live --engine URL``: what the running engines serve is read from them
(``live_services.Engines.read``), here from emulators standing in for vLLM's
``/v1/models``; the real-vLLM cells are ``tests/vllm/test_vllm_matrix_cells.py``."""

from __future__ import annotations

import pytest

from commands.live_services import Engines
from emulator.embedded import EmulatorSpec, start_emulators
from emulator.profile import load_profile


def test_the_served_model_and_its_length_are_read_from_the_engines() -> None:
    specs = [EmulatorSpec(profile="cpu-tiny", model_name="tiny", seed=i) for i in range(2)]
    with start_emulators(specs) as fleet:
        urls = fleet.urls
        engines = Engines.read(urls)
    assert engines.urls == tuple(urls)
    assert engines.model == "tiny"
    assert engines.max_model_len == load_profile("cpu-tiny").engine.max_model_len


def test_engines_that_serve_different_models_are_refused() -> None:
    specs = [EmulatorSpec(profile="cpu-tiny", model_name=name) for name in ("tiny", "other")]
    with start_emulators(specs) as fleet, pytest.raises(ValueError, match="one model alike"):
        Engines.read(fleet.urls)
