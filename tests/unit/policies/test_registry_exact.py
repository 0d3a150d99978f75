"""``build_policy`` to the message: each error's exact location and text (unknown keys with
their did-you-mean or the known keys, found at any depth of a parameter model: a field, a list
item, a dict value, an optional model), the defaults a missing part takes, the gates built with
their names and shadow flags, the version hash, tenant references, and plugins of one's own."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from policies import registry
from policies.backends import BackendView
from policies.contracts import BackendLoad, Gate, Limit
from policies.params import NoParams, Params
from policies.registry import (
    PolicyConfigError,
    build_policy,
    error_message,
    keys_at,
    register,
    registered,
    tenant_references,
)


def errors(raw: Any) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(PolicyConfigError) as info:
        build_policy(raw)
    return info.value.errors


def test_the_error_text_names_each_location_or_the_whole_section() -> None:
    assert str(PolicyConfigError([(("gates", 0, "name"), "bad"), ((), "worse")])) == (
        "gates.0.name: bad; <policy>: worse"
    )
    assert errors(["limit"]) == [((), "policy must be a mapping")]


def test_unknown_section_keys_and_a_bad_name() -> None:
    assert errors({"limt": {}, "name": ""}) == [
        (("limt",), "unknown key 'limt'; did you mean 'limit'?"),
        (("name",), "must be a non-empty string"),
    ]
    assert errors({"name": 5}) == [(("name",), "must be a non-empty string")]
    assert build_policy({"name": "calm"}).name == "calm"
    assert build_policy(None).name == "default"


def test_the_version_is_the_first_twelve_hex_digits_of_the_canonical_json() -> None:
    raw = {"queue": {"max_wait_s": 10}, "name": "a"}
    canon = b'{"name":"a","queue":{"max_wait_s":10}}'
    assert build_policy(raw).version == hashlib.sha256(canon).hexdigest()[:12]
    assert build_policy(None).version == hashlib.sha256(b"{}").hexdigest()[:12]


def test_missing_parts_take_their_defaults_and_given_parts_are_used() -> None:
    built = build_policy({"queue": {"max_wait_s": 7, "discipline": {"type": "codel"}}})
    assert built.queue.max_wait_s == 7 and built.discipline.type_name == "codel"
    assert (built.limit.type_name, built.fairness.type_name, built.gates) == (
        "server_signals",
        "vtc",
        (),
    )
    signals = build_policy({"limit": {"parameters": {"slow_start": False}}}).limit
    assert signals.type_name == "server_signals" and signals.params.slow_start is False  # type: ignore[attr-defined]


def test_plugin_spec_errors_are_located_and_name_the_known_types() -> None:
    known = "(known: adaptive, fixed, server_signals)"
    assert errors({"limit": {"type": "fixd"}}) == [
        (("limit", "type"), f"unknown limit type 'fixd'; did you mean 'fixed'? {known}"),
    ]
    assert errors({"limit": {"type": 5}}) == [
        (("limit", "type"), f"unknown limit type 5 {known}"),
    ]
    assert errors({"limit": "fixed"}) == [
        (("limit",), "must be a mapping with 'type' and optional 'parameters'")
    ]
    typo = (("limit", "paramters"), "unknown key 'paramters'; did you mean 'parameters'?")
    assert errors({"limit": {"type": "fixed", "paramters": {}}}) == [typo]
    assert errors(
        {"limit": {"type": "fixed", "paramters": {}, "parameters": {"max_in_flight": 0}}}
    ) == [
        typo,
        (("limit", "parameters", "max_in_flight"), "Input should be greater than 0"),
    ]
    assert errors({"queue": 3}) == [(("queue",), "must be a mapping")]


def test_parameter_errors_give_the_model_keys_at_their_depth() -> None:
    quota = {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minuet": 5}}}
    tenants = {"type": "tenant_quota", "name": "q2", "parameters": {"tenants": {"a": {"zzz": 1}}}}
    codel = {"type": "codel", "parameters": {"bogus": 1}}
    assert errors({"gates": [quota, tenants], "queue": {"discipline": codel}}) == [
        (
            ("queue", "discipline", "parameters", "bogus"),
            "unknown key 'bogus' (known: interval_s, target_s)",
        ),
        (
            ("gates", 0, "parameters", "default", "tokens_per_minuet"),
            "unknown key 'tokens_per_minuet'; did you mean 'tokens_per_minute'?",
        ),
        (
            ("gates", 1, "parameters", "tenants", "a", "zzz"),
            "unknown key 'zzz' (known: burst_tokens, max_concurrent, tokens_per_minute)",
        ),
    ]
    assert errors({"ladder": {"steps": [{"nme": "x", "at": 0.5, "action": "reject"}]}})[1] == (
        ("ladder", "steps", 0, "nme"),
        "unknown key 'nme'; did you mean 'name'?",
    )
    assert errors({"fairness": {"type": "fifo", "parameters": {"x": 1}}}) == [
        (("fairness", "parameters", "x"), "unknown key 'x'")
    ]


def test_validator_messages_lose_the_prefix_and_others_keep_pydantics() -> None:
    codel = {"type": "codel", "parameters": {"target_s": 5, "interval_s": 5}}
    assert errors({"queue": {"discipline": codel}}) == [
        (("queue", "discipline", "parameters"), "target_s must be below interval_s")
    ]
    assert errors({"limit": {"type": "fixed", "parameters": {"max_in_flight": 0}}}) == [
        (("limit", "parameters", "max_in_flight"), "Input should be greater than 0")
    ]


class Asserting(BaseModel):
    x: int

    @field_validator("x")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise AssertionError("x must be positive")
        return v


def test_an_assertion_in_a_validator_keeps_pydantics_text() -> None:
    with pytest.raises(ValidationError) as info:
        Asserting(x=0)
    (error,) = info.value.errors()
    assert error_message(Asserting, error) == "Assertion failed, x must be positive"


class Inner(Params):
    alpha: int = 0
    beta: int = 0


class Other(Params):
    gamma: int = 0


class Outer(Params):
    choice: Inner | Other = Inner()
    maybe: Inner | None = None
    many: list[Inner] = []
    pair: tuple[Inner, ...] = ()
    by_name: dict[str, Inner] = {}
    either: Inner | int = 0
    plain: int = 0


def test_keys_at_walks_fields_list_items_dict_values_and_optional_models() -> None:
    inner = ["alpha", "beta"]
    assert keys_at(Outer, ()) == ["choice", "maybe", "many", "pair", "by_name", "either", "plain"]
    assert keys_at(Outer, ("maybe",)) == inner
    assert keys_at(Outer, ("many", 0)) == inner and keys_at(Outer, ("pair", 1)) == inner
    assert keys_at(Outer, ("by_name", "k")) == inner
    for loc in [("many",), ("either",), ("plain",), ("nothing",), ("plain", 0), ("by_name",)]:
        assert keys_at(Outer, loc) == [], loc


def test_an_unknown_key_in_one_of_two_models_names_no_keys_rather_than_the_wrong_ones() -> None:
    with pytest.raises(ValidationError) as info:
        Outer.model_validate({"choice": {"zzz": 1}})
    found = {e["loc"]: error_message(Outer, e) for e in info.value.errors()}
    assert found[("choice", "Inner", "zzz")] == "unknown key 'zzz'"
    assert found[("choice", "Other", "zzz")] == "unknown key 'zzz'"


def gate_names(raw: list[Any]) -> list[tuple[str, str, bool]]:
    return [(g.name, g.gate.type_name, g.shadow) for g in build_policy({"gates": raw}).gates]


def test_gates_are_built_in_order_with_their_names_and_shadow_flags() -> None:
    raw = [
        {"type": "retry_budget"},
        {"type": "retry_budget", "name": "second", "shadow": True},
        {"type": "deadline_feasibility", "shadow": False},
    ]
    assert gate_names(raw) == [
        ("retry_budget", "retry_budget", False),
        ("second", "retry_budget", True),
        ("deadline_feasibility", "deadline_feasibility", False),
    ]
    assert gate_names([]) == []


def test_gate_list_errors_are_located() -> None:
    assert errors({"gates": {"type": "deadline_feasibility"}}) == [(("gates",), "must be a list")]
    assert errors(
        {
            "gates": [
                "deadline_feasibility",
                {"name": "x"},
                {"type": "deadline_feasibility", "shadow": 1},
            ]
        }
    ) == [
        (("gates", 0), "each gate needs a 'type'"),
        (("gates", 1), "each gate needs a 'type'"),
        (("gates", 2, "shadow"), "must be true or false"),
    ]
    assert errors({"gates": [{"type": "deadline_feasibility", "name": 3}]}) == [
        (("gates", 0, "name"), "gate name 3 must be a unique string")
    ]
    assert errors(
        {"gates": [{"type": "deadline_feasibility"}, {"type": "deadline_feasibility", "nam": "b"}]}
    ) == [
        (("gates", 1, "nam"), "unknown key 'nam'; did you mean 'name'?"),
        (("gates", 1, "name"), "gate name 'deadline_feasibility' must be a unique string"),
    ]


def test_tenant_references_are_located_in_every_gate() -> None:
    quota = {"type": "tenant_quota", "parameters": {"tenants": {"a": {}, "b": {}}}}
    raw = {"gates": [{"type": "deadline_feasibility"}, quota], "queue": {"max_wait_s": 3}}
    assert tenant_references(raw) == [
        (("gates", 1, "parameters", "tenants", "a"), "a"),
        (("gates", 1, "parameters", "tenants", "b"), "b"),
    ]
    assert tenant_references({}) == [] and tenant_references(["gates"]) == []
    assert tenant_references({"gates": "x", "queue": "y"}) == []
    bad = {"type": "tenant_quota", "parameters": {"tenants": {"a": {"zzz": 1}}}}
    assert tenant_references({"gates": [bad]}) == []  # invalid: build_policy reports it


class Lenient(Limit[None, NoParams]):
    type_name = "lenient_for_test"

    def new_state(self) -> None:
        return None

    def has_room(self, state: None, backend: BackendView, load: BackendLoad) -> bool:
        return True


def test_a_plugin_of_ones_own_is_registered_under_its_role(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", {r: dict(p) for r, p in registry._REGISTRY.items()})
    assert register("limit")(Lenient) is Lenient
    assert (
        build_policy({"limit": {"type": "lenient_for_test"}}).limit.type_name == "lenient_for_test"
    )
    listed = registered("limit")
    listed.pop("lenient_for_test")  # type: ignore[attr-defined]
    assert "lenient_for_test" in registered("limit")  # a copy was handed out
    with pytest.raises(TypeError, match="Lenient is not a gate"):
        register("gate")(Lenient)
    assert "lenient_for_test" not in registered("gate")
    assert issubclass(registered("gate")["deadline_feasibility"], Gate)
