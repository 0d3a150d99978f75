from __future__ import annotations

import pytest

from emulator.profile import Profile, load_profile
from simulation.workload import AgentWorkload


@pytest.fixture(scope="session")
def profile() -> Profile:
    return load_profile("rx9070xt")


@pytest.fixture
def workload(profile: Profile) -> AgentWorkload:
    return AgentWorkload(profile.output_lengths)
