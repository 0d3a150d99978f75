"""Every registered policy, in every role, against the same contract."""

from __future__ import annotations

import random
from typing import Any

import pytest

from policies.contracts import Plugin
from policies.engine.scheduler import Scheduler
from policies.plugins import Role
from policies.registry import PolicyConfigError, build_policy, registered
from policies.types import Outcome, Usage

from .helpers import ManualClock, backend, fleet, request
from .ledger import Ledger

ROLES: tuple[Role, ...] = ("limit", "fairness", "discipline", "gate")
ALL = [(role, name) for role in ROLES for name in registered(role)]


def example(role: Role, name: str) -> dict[str, Any]:
    """The plugin's own example parameters: a new plugin needs no row here."""
    return registered(role)[name].params_model.example()


def section(role: Role, name: str, params: dict[str, Any]) -> dict[str, Any]:
    spec = {"type": name, "parameters": params}
    if role == "gate":
        return {"gates": [spec]}
    if role == "discipline":
        return {"queue": {"discipline": spec, "max_wait_s": 5}}
    return {role: spec, "queue": {"max_wait_s": 5}}


@pytest.mark.parametrize(("role", "name"), ALL)
def test_every_example_validates(role: Role, name: str) -> None:
    cls = registered(role)[name]
    built = cls.params_model.model_validate(example(role, name))
    assert isinstance(built, cls.params_model)


@pytest.mark.parametrize(("role", "name"), ALL)
def test_unknown_parameters_are_rejected(role: Role, name: str) -> None:
    with pytest.raises(PolicyConfigError) as info:
        build_policy(section(role, name, {**example(role, name), "nope": 1}))
    assert any(loc[-1] == "nope" for loc, _ in info.value.errors)


@pytest.mark.parametrize(("role", "name"), ALL)
def test_lifecycle_contract(role: Role, name: str) -> None:
    policy = build_policy(section(role, name, example(role, name)))
    clock = ManualClock()
    rng = random.Random(5)
    f = fleet(clock, backend("a", max_num_seqs=2), backend("b", max_num_seqs=3))
    ledger = Ledger(Scheduler(policy, clock=clock, rng=rng), clock, f)
    for i in range(120):
        clock.advance(rng.expovariate(8.0))
        ledger.submit(_random_request(clock, rng, i))
        if ledger.tickets and rng.random() < 0.5:
            rid = rng.choice(sorted(ledger.tickets))
            outcome = rng.choice([Outcome.COMPLETED, Outcome.FAILED, Outcome.CANCELLED])
            ledger.release(rid, outcome, Usage(rng.randint(1, 300), rng.randint(0, 300)))
        if ledger.delayed and rng.random() < 0.1:
            ledger.cancel(rng.choice(sorted(ledger.delayed)))
        ledger.poll()
    ledger.drain()
    ledger.assert_clean()
    _holds_parameters_only(policy_component(policy, role))


def policy_component(policy: Any, role: Role) -> Plugin[Any, Any]:
    if role == "gate":
        return policy.gates[0].gate  # type: ignore[no-any-return]
    return getattr(policy, role)  # type: ignore[no-any-return]


def _holds_parameters_only(plugin: Plugin[Any, Any]) -> None:
    assert _attributes_set(plugin) == {"params"}
    assert plugin.new_state() is not plugin.new_state() or plugin.new_state() is None


def _attributes_set(obj: object) -> set[str]:
    """The attributes an instance holds: its ``__dict__``, or, for a class compiled by mypyc
    (no ``__dict__``), the attributes it declares that are set."""
    if hasattr(obj, "__dict__"):
        return set(vars(obj))
    declared = getattr(type(obj), "__mypyc_attrs__", ())
    return {n for n in declared if n != "__dict__" and hasattr(obj, n)}


def _random_request(clock: ManualClock, rng: random.Random, i: int) -> Any:
    return request(
        clock,
        tenant=rng.choice(["t1", "t2", "t3"]),
        prompt=rng.randint(10, 400),
        output=rng.randint(10, 200),
        deadline_in=rng.choice([None, 0.5, 3.0]),
        priority=rng.choice([0, 1]),
        is_retry=i % 7 == 0,
        session_id=rng.choice([None, "s1", "s2"]),
    )
