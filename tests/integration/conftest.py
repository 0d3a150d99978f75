"""Emulator fixtures for integration tests: real HTTP on loopback, in-process, fast clock.

* ``start_emulator(**spec)`` starts one emulator (``EmulatorSpec`` fields: ``profile``,
  ``model_name``, ``speed``, ``seed``, ``max_num_queued_reqs``) on a free 127.0.0.1 port and
  returns an ``EmbeddedEmulator`` (``.url``, ``.runner.engine`` for engine state); every one
  started is stopped at teardown.
* ``emulator``: one ``rx9070xt`` emulator serving model ``emulated`` at 20x speed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from emulator.embedded import EmbeddedEmulator, EmulatorSpec
from emulator.embedded import start_emulator as _start

StartEmulator = Callable[..., EmbeddedEmulator]


@pytest.fixture
def start_emulator() -> Iterator[StartEmulator]:
    started: list[EmbeddedEmulator] = []

    def start(**spec: Any) -> EmbeddedEmulator:
        emulator = _start(EmulatorSpec(**spec))
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()


@pytest.fixture
def emulator(start_emulator: StartEmulator) -> EmbeddedEmulator:
    return start_emulator(profile="rx9070xt", model_name="emulated", speed=20.0)
