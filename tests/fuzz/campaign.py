"""The campaigns: hypothesis generates, the harness judges. ``collect`` keeps going and
gathers findings (the long command); without it the first finding fails, shrunk (CI)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.harness import ConfigChecker, Finding, GatewayDriver
from tests.fuzz.strategies import bodies, config_documents, headers, paths

methods = st.sampled_from(["POST"] * 9 + ["GET"])


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


def run_requests(
    driver: GatewayDriver,
    examples: int,
    *,
    collect: list[Finding] | None = None,
    at_seed: int | None = None,
) -> None:
    """``examples`` generated requests (method, path, headers, body) through ``driver``."""

    @_settings(examples, collect is not None)
    @given(method=methods, path=paths, hdrs=headers, body=bodies)
    def one(method: str, path: str, hdrs: dict[str, str], body: bytes) -> None:
        _report(driver.exchange(method, path, hdrs, body), collect)

    _seeded(one, at_seed)()


def run_configs(
    checker: ConfigChecker,
    examples: int,
    *,
    collect: list[Finding] | None = None,
    at_seed: int | None = None,
) -> None:
    """``examples`` generated config files through ``checker``."""

    @_settings(examples, collect is not None)
    @given(raw=config_documents())
    def one(raw: bytes) -> None:
        _report(checker.check(raw), collect)

    _seeded(one, at_seed)()


def _seeded(test: Callable[[], None], at_seed: int | None) -> Callable[[], None]:
    return test if at_seed is None else seed(at_seed)(test)
