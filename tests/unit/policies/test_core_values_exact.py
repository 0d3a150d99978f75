"""The values the decision core passes around, to the field: deadline buckets at and either side
of each bound, flow keys, totals, the defaults a request, a queue entry, a backend and its load
start from, decisions' equality, hash and repr, which backends serve a model, the base
plugin hooks, parameter examples, and which core (compiled or not) a process runs."""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

import pytest
from pydantic import ConfigDict

import policies
from policies import build
from policies.backends import BackendsSnapshot, Health
from policies.contracts import BackendLoad, Gate, GateContext, QueuedEntry, Verdict
from policies.fairness.fifo import Fifo
from policies.gates.quota import TenantQuota
from policies.limits.adaptive_params import AdaptiveParams
from policies.params import NoParams, Params
from policies.types import (
    NO_DEGRADATION,
    Decision,
    DecisionKind,
    FlowKey,
    Reason,
    RequestInfo,
    Usage,
    WorkEstimate,
    deadline_bucket,
)

from .helpers import backend


@pytest.mark.parametrize(
    ("seconds", "bucket"),
    [
        (None, "none"),
        (0.5, "le1s"),
        (1.0, "le1s"),
        (1.5, "le10s"),
        (9.5, "le10s"),
        (10.0, "le10s"),
        (10.5, "le60s"),
        (59.5, "le60s"),
        (60.0, "le60s"),
        (60.5, "le10m"),
        (599.5, "le10m"),
        (600.0, "le10m"),
        (600.5, "gt10m"),
    ],
)
def test_a_deadline_falls_in_the_bucket_of_the_first_bound_it_does_not_exceed(
    seconds: float | None, bucket: str
) -> None:
    assert deadline_bucket(seconds) == bucket


def req(**kw: object) -> RequestInfo:
    return RequestInfo("r1", "acme", "batch", "m", WorkEstimate(30, 12), 1000.0, **kw)  # type: ignore[arg-type]


def test_a_request_is_keyed_by_its_deadline_relative_to_its_arrival() -> None:
    assert req(deadline=1005.0).flow == FlowKey("acme", "batch", "m", "le10s")
    assert str(req().flow) == "acme/batch/m/none"
    assert req(deadline=1000.5).flow_fields() == ("acme", "batch", "m", "le1s")


def test_a_requests_defaults_and_totals() -> None:
    r = req()
    assert (r.priority, r.weight, r.is_retry, r.session_id) == (0, 1.0, False, None)
    assert (r.estimate.total, r.estimate.sequences) == (42, 1)
    assert Usage(30, 12).total == 42


def decision(**kw: object) -> Decision:
    args: dict[str, object] = {
        "decision": DecisionKind.ADMIT,
        "reason": Reason.CAPACITY_AVAILABLE,
        "request_id": "r1",
        "tenant": "acme",
        "flow": FlowKey("acme", "batch", "m", "none"),
        "estimate": WorkEstimate(30, 12),
        "policy": "p",
        "policy_version": "v1",
        **kw,
    }
    return Decision(**args)  # type: ignore[arg-type]


def test_decisions_are_equal_and_hash_alike_by_every_field() -> None:
    a, b = decision(), decision()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != decision(backend="b1") and a != decision(retry_after_s=1.0)
    assert (a == "r1") is False and (a != "r1") is True
    assert a.reservation_tokens == 0 and a.shadowed == () and a.degradation is NO_DEGRADATION


def test_a_decisions_repr_names_every_field_in_order() -> None:
    text = repr(decision(backend="b1"))
    assert text.startswith("Decision(decision=<DecisionKind.ADMIT: 'admit'>, reason=")
    assert text.endswith(
        "reservation_tokens=0, retry_after_s=None, queue_position=None, "
        "degradation=Degradation(steps=(), max_tokens=None, model=None), "
        "backend='b1', shadowed=())"
    )


def test_only_admit_and_degrade_are_admitted() -> None:
    got = {k: decision(decision=k).admitted for k in DecisionKind}
    assert got == {
        DecisionKind.ADMIT: True,
        DecisionKind.DEGRADE: True,
        DecisionKind.DELAY: False,
        DecisionKind.REJECT: False,
    }


def test_a_fleet_finds_backends_by_name_and_by_the_model_they_serve() -> None:
    a, b = backend("a", ("m", "x")), backend("b", ("m",), health=Health.DEGRADED)
    gone = backend("c", ("m", "x"), health=Health.DOWN)
    f = BackendsSnapshot(1.0, (a, b, gone))
    assert f.get("b") is b and f.get("c") is gone and f.get("z") is None
    assert f.serving("m") == (a, b) and f.serving("x") == (a,) and f.serving("y") == ()
    assert (a.available, b.available, gone.available) == (True, True, False)
    assert a.serves("x") and not b.serves("x")
    assert f.any_available and not BackendsSnapshot(1.0, (gone,)).any_available
    assert a.peer_in_flight == 0 and BackendLoad() == BackendLoad(0, 0)
    assert (BackendLoad().in_flight, BackendLoad().in_flight_tokens) == (0, 0)


def test_a_queued_entry_starts_alive_at_generation_zero_and_names_itself() -> None:
    r = req()
    e = QueuedEntry(
        r, DecisionKind.ADMIT, NO_DEGRADATION, (), 1.0, 2.0, Reason.OVERLOADED, 7, r.flow
    )
    assert (e.alive, e.gen) == (True, 0)
    assert repr(e) == "QueuedEntry('r1', seq=7, alive=True, gen=0)"
    ctx = GateContext(5.0, 10, 2.5, None, True)
    assert repr(ctx) == (
        "GateContext(now=5.0, queued_tokens=10, drain_tokens_per_s=2.5, exec_p95_s=None, "
        "room_now=True, oldest_queued_s=None, appointment=False)"
    )


class BareGate(Gate[None, NoParams]):
    type_name = "bare"

    def new_state(self) -> None:
        return None

    def check(self, state: None, req: RequestInfo, ctx: GateContext) -> Verdict | None:
        return None


def test_the_base_hooks_and_which_a_plugin_overrides() -> None:
    bare = BareGate(NoParams())
    assert bare.reads_rates() is True
    assert not bare.overrides(Gate, "on_accept") and bare.overrides(Gate, "check")
    quota = TenantQuota(TenantQuota.params_model())
    assert quota.overrides(Gate, "on_accept")
    fifo = Fifo(NoParams())
    assert fifo.deficits(fifo.new_state()) == {}


class TwoExamples(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [{"a": 1}, {"a": 2}]})
    a: int = 0


class NoExamples(Params):
    model_config = ConfigDict(json_schema_extra={"examples": []})


class NotAMapping(Params):
    model_config = ConfigDict(json_schema_extra={"examples": [3]})


def test_a_parameter_models_example_is_its_first_else_the_defaults() -> None:
    assert AdaptiveParams.example() == {"target_s": 0.5}
    assert TwoExamples.example() == {"a": 1}
    assert NoParams.example() == {} and NoExamples.example() == {} and NotAMapping.example() == {}
    assert NoParams().tenant_references() == []


def test_the_core_is_interpreted_compiled_or_mixed(monkeypatch: pytest.MonkeyPatch) -> None:
    for found, core in [
        ((), "interpreted"),
        (("engine.scheduler", "types"), "compiled"),
        (("engine.scheduler",), "mixed"),
        (("types",), "mixed"),
    ]:
        monkeypatch.setattr(build, "compiled_modules", lambda found=found: found)
        assert build.core() == core


def test_compiled_modules_are_found_by_their_extension_suffix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build.compiled_modules.cache_clear()
    monkeypatch.setattr(policies, "__path__", [str(tmp_path)])
    (tmp_path / ("fakeext" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"")
    (tmp_path / "plain.py").write_text("")
    try:
        assert build.compiled_modules() == ("fakeext",)
    finally:
        build.compiled_modules.cache_clear()
