"""The campaigns: hypothesis generates, the harness judges. ``collect`` keeps going and
gathers findings (the long command); without it the first finding fails, shrunk (CI)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.harness import ConfigChecker, Finding, GatewayDriver
from tests.fuzz.strategies import bodies, config_documents, headers, paths

methods = st.sampled_from(["POST"] * 9 + ["GET"])
H = TypeVar("H")


def _settings(examples: int, collect: bool) -> settings:
    phases = [Phase.generate] if collect else [Phase.generate, Phase.shrink]
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=True,  # a failure prints the blob that replays it (@reproduce_failure)
    )


def _report(finding: Finding | None, collect: list[Finding] | None) -> None:
    if finding is None:
        return
    if collect is None:
        raise AssertionError(f"{finding.signature}\n{finding.detail}\n{finding.example}")
    collect.append(finding)


class Campaign(Generic[H]):
    """Generated examples (``drawn``: a strategy per argument of ``check``) through a
    harness; ``examples`` of them, seeded ``at_seed`` when given."""

    def __init__(
        self, check: Callable[..., Finding | None], **drawn: st.SearchStrategy[Any]
    ) -> None:
        self._check, self._drawn = check, drawn

    def __call__(
        self,
        harness: H,
        examples: int,
        *,
        collect: list[Finding] | None = None,
        at_seed: int | None = None,
    ) -> None:
        @_settings(examples, collect is not None)
        @given(**self._drawn)
        def one(**example: Any) -> None:
            _report(self._check(harness, **example), collect)

        _seeded(one, at_seed)()


run_requests = Campaign[GatewayDriver](
    GatewayDriver.exchange, method=methods, path=paths, headers=headers, body=bodies
)
"""Generated requests (method, path, headers, body) through a ``GatewayDriver``."""
run_configs = Campaign[ConfigChecker](ConfigChecker.check, raw=config_documents())
"""Generated config files through a ``ConfigChecker``."""


def _seeded(test: Callable[[], None], at_seed: int | None) -> Callable[[], None]:
    return test if at_seed is None else seed(at_seed)(test)
