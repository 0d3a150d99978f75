from __future__ import annotations

import pytest

from policies.registry import PolicyConfigError, build_policy


def test_empty_section_builds_the_default_policy() -> None:
    p = build_policy({})
    assert p.limit.type_name == "server_signals"
    assert p.fairness.type_name == "vtc"
    assert p.discipline.type_name == "deadline"
    assert build_policy(None).version == p.version


def test_every_error_is_reported_together_with_its_location() -> None:
    raw = {
        "limit": {"type": "fixed", "parameters": {"max_in_flight": 0}},
        "fairness": {"type": "no_such_thing"},
        "queue": {"max_wait_s": -1, "discipline": {"type": "codel", "parameters": {"bogus": 1}}},
        "gates": [
            {"type": "tenant_quota", "parameters": {"default": {"tokens_per_minute": "lots"}}},
            {"type": "retry_budget", "shadow": "maybe"},
        ],
        "ladder": {"steps": [{"name": "x", "at": 0.5, "action": "cap_max_tokens"}]},
        "surprise": 1,
    }
    with pytest.raises(PolicyConfigError) as info:
        build_policy(raw)
    locs = {loc for loc, _ in info.value.errors}
    assert ("limit", "parameters", "max_in_flight") in locs
    assert ("fairness", "type") in locs
    assert ("queue", "max_wait_s") in locs
    assert ("queue", "discipline", "parameters", "bogus") in locs
    assert ("gates", 0, "parameters", "default", "tokens_per_minute") in locs
    assert ("gates", 1, "shadow") in locs
    assert ("ladder", "steps", 0) in locs
    assert ("surprise",) in locs


def test_duplicate_gate_names_are_an_error() -> None:
    with pytest.raises(PolicyConfigError) as info:
        build_policy({"gates": [{"type": "retry_budget"}, {"type": "retry_budget"}]})
    assert [loc for loc, _ in info.value.errors] == [("gates", 1, "name")]


def test_version_follows_the_config() -> None:
    a = build_policy({"queue": {"max_wait_s": 10}})
    b = build_policy({"queue": {"max_wait_s": 20}})
    assert a.version != b.version
    assert a.version == build_policy({"queue": {"max_wait_s": 10}}).version


@pytest.mark.parametrize("queue", ["fifo", [["max_wait_s", 5]], ["abcdef"], 7, True])
def test_a_queue_section_that_is_not_a_mapping_is_a_located_error(queue: object) -> None:
    with pytest.raises(PolicyConfigError) as info:
        build_policy({"queue": queue, "fairness": {"type": "no_such_thing"}})
    locs = {loc for loc, _ in info.value.errors}
    assert ("queue",) in locs and ("fairness", "type") in locs  # and the others still found


def test_tenant_references_skip_a_plugin_type_that_is_not_a_name() -> None:
    """A list where a type name belongs is the build's error to report, located; looking for
    tenant names in it must not raise (found by the config fuzzer)."""
    from policies.registry import tenant_references

    raw = {"queue": {"discipline": {"type": ["server"]}}, "gates": [{"type": {"a": 1}}]}
    assert tenant_references(raw) == []
    with pytest.raises(PolicyConfigError):
        build_policy(raw)
