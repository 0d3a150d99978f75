"""Fixtures of the real-Envoy tier: emulators in this process, ``sluicegate epp`` and Envoy
as child processes, all on free loopback ports, stopped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from emulator.embedded import EmbeddedEmulator, EmulatorSpec, start_emulator
from tests.envoy.stack import Envoy, Epp, envoy_binary, running_envoy, running_epp
from tests.integration.harness import api_key, gateway_config


@dataclass
class Stack:
    epp: Epp
    envoy: Envoy
    emulators: list[EmbeddedEmulator]

    def sdk(self, tenant: str = "alice", retries: int = 0, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.envoy.url}/v1",
            api_key=api_key(tenant),
            max_retries=retries,
            timeout=60.0,
            **kw,
        )


StackFactory = Callable[..., Stack]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[StackFactory]:
    """``stack(policy, *, speed=20.0, urls=None, envoy=..., **config)``: emulators (or the
    backends at ``urls``), the picker in front of them and Envoy wired to the picker."""
    envoy_binary()  # fails under CI=true, skips elsewhere, when Envoy is missing
    with ExitStack() as exits:

        def build(
            policy: dict[str, Any] | None = None,
            *,
            speed: float = 20.0,
            urls: list[str] | None = None,
            envoy: dict[str, Any] | None = None,
            **config: Any,
        ) -> Stack:
            emulators: list[EmbeddedEmulator] = []
            if urls is None:
                emulator = start_emulator(EmulatorSpec(model_name="emulated", speed=speed))
                exits.callback(emulator.stop)
                emulators.append(emulator)
                urls = [emulator.url]
            raw = gateway_config(urls, policy or {}, **config)
            epp = exits.enter_context(running_epp(raw, tmp_path))
            proxy = exits.enter_context(running_envoy(epp.grpc_port, tmp_path, **(envoy or {})))
            return Stack(epp, proxy, emulators)

        yield build
