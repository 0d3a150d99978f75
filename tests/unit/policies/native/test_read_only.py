"""``read_only`` value classes (``Decision``, ``GateContext``, ``Ticket``): attributes that
cannot be assigned, compiled or not; equality, hashing and ``repr`` by fields; and a refusal
of any ``__init__`` whose interpreted replacement would do less than it."""

from __future__ import annotations

from typing import Final

import pytest

from policies.contracts import GateContext
from policies.engine.scheduler_types import TICKET_FIELDS, Ticket
from policies.native.read_only import is_native, read_only
from policies.types import (
    DECISION_FIELDS,
    NO_DEGRADATION,
    Decision,
    DecisionKind,
    Degradation,
    Reason,
)
from tests.unit.policies.helpers import ManualClock, request

REQ = request(ManualClock(), tenant="t")


def _decision(**changes: object) -> Decision:
    req = REQ
    fields = {
        "decision": DecisionKind.ADMIT,
        "reason": Reason.CAPACITY_AVAILABLE,
        "request_id": req.request_id,
        "tenant": "t",
        "flow": req.flow,
        "estimate": req.estimate,
        "policy": "p",
        "policy_version": "v1",
    }
    return Decision(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", DECISION_FIELDS)
def test_no_attribute_of_a_decision_can_be_assigned_or_deleted(name: str) -> None:
    d = _decision()
    before = getattr(d, name)
    with pytest.raises(AttributeError):
        setattr(d, name, None)
    with pytest.raises(AttributeError):
        delattr(d, name)
    assert getattr(d, name) is before


@pytest.mark.parametrize(
    "name",
    ["now", "queued_tokens", "drain_tokens_per_s", "exec_p95_s", "room_now", "oldest_queued_s"],
)
def test_no_attribute_of_a_gate_context_can_be_assigned(name: str) -> None:
    ctx = GateContext(1.0, 2, 3.0, 4.0, True)
    with pytest.raises(AttributeError):
        setattr(ctx, name, None)
    assert (
        ctx.now,
        ctx.queued_tokens,
        ctx.drain_tokens_per_s,
        ctx.exec_p95_s,
        ctx.room_now,
        ctx.oldest_queued_s,
    ) == (1.0, 2, 3.0, 4.0, True, None)
    assert repr(ctx).startswith("GateContext(now=1.0, queued_tokens=2, drain_tokens_per_s=3.0")


@pytest.mark.parametrize("name", TICKET_FIELDS)
def test_no_attribute_of_a_ticket_can_be_assigned_and_it_compares_by_fields(name: str) -> None:
    ticket = Ticket("r1", "b1", _decision(), 1.5, REQ)
    with pytest.raises(AttributeError):
        setattr(ticket, name, None)
    same = Ticket(*ticket.fields())
    assert same == ticket and hash(same) == hash(ticket) and same is not ticket
    assert Ticket("r1", "b2", _decision(), 1.5, REQ) != ticket
    assert repr(ticket).startswith("Ticket(request_id='r1', backend='b1', decision=Decision(")


def test_a_decision_has_no_room_for_other_attributes() -> None:
    with pytest.raises(AttributeError):
        _decision().note = "x"  # type: ignore[attr-defined]


def test_defaults_keywords_and_positions_give_the_same_decision() -> None:
    d = _decision()
    assert (d.reservation_tokens, d.retry_after_s, d.queue_position) == (0, None, None)
    assert d.degradation is NO_DEGRADATION and d.backend is None and d.shadowed == ()
    by_position = Decision(*d.fields())
    assert by_position == d and hash(by_position) == hash(d)
    with pytest.raises(TypeError):
        Decision(*d.fields(), "one too many")  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "change",
    [
        {"reason": Reason.QUEUE_FULL},
        {"retry_after_s": 1.0},
        {"backend": "b"},
        {"degradation": Degradation(steps=("s",))},
        {"shadowed": ("g",)},
    ],
)
def test_equality_and_hash_go_by_every_field(change: dict[str, object]) -> None:
    assert _decision() == _decision() and hash(_decision()) == hash(_decision())
    assert _decision(**change) != _decision()
    assert _decision() != object() and len({_decision(), _decision(**change)}) == 2


def test_repr_names_every_field_in_order() -> None:
    text = repr(_decision(backend="b7"))
    assert text.startswith("Decision(decision=<DecisionKind.ADMIT")
    positions = [text.index(f"{name}=") for name in DECISION_FIELDS]
    assert positions == sorted(positions) and "backend='b7'" in text


def test_the_interpreted_class_is_made_read_only_and_a_compiled_one_is_left_alone() -> None:
    import policies.types

    compiled = not policies.types.__file__.endswith(".py")
    for cls in (Decision, GateContext, Ticket):
        assert is_native(cls) is compiled
        assert ("__setattr__" in cls.__dict__) is not compiled  # read_only's refusal


class _Point:
    __slots__ = ("x", "y")

    def __init__(self, x: int, y: int = 2) -> None:
        self.x: Final = x
        self.y: Final = y


def test_read_only_keeps_the_signature_and_defaults() -> None:
    point = read_only(_Point)
    p = point(1)
    assert (p.x, p.y) == (1, 2) and (point(y=5, x=4).x, point(y=5, x=4).y) == (4, 5)
    with pytest.raises(AttributeError):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        point()  # type: ignore[call-arg]


def test_read_only_refuses_an_init_that_does_more_than_store_its_parameters() -> None:
    class Doubles:
        __slots__ = ("x",)

        def __init__(self, x: int) -> None:
            self.x = x * 2

    class Renames:
        __slots__ = ("x", "y")

        def __init__(self, x: int, y: int) -> None:
            self.x, self.y = y, x

    class Extra:
        __slots__ = ("x",)

        def __init__(self, x: int, scale: int) -> None:
            self.x = x

    for cls in (Doubles, Renames, Extra):
        with pytest.raises(TypeError):
            read_only(cls)


def test_read_only_refuses_a_class_without_slots_or_its_own_init_or_plain_parameters() -> None:
    class NoSlots:
        def __init__(self, x: int) -> None:
            self.x = x

    class ListSlots:
        __slots__ = ["x"]

        def __init__(self, x: int) -> None:
            self.x = x

    class InheritedInit(_Point):
        __slots__ = ()

    for cls in (NoSlots, ListSlots, InheritedInit):
        with pytest.raises(TypeError, match="read_only needs __slots__ and its own __init__"):
            read_only(cls)


def test_read_only_refuses_parameters_that_are_not_its_slots_taken_plainly() -> None:
    class PositionalOnly:
        __slots__ = ("x",)

        def __init__(self, x: int, /) -> None:
            self.x = x

    class KeywordOnly:
        __slots__ = ("x",)

        def __init__(self, *, x: int) -> None:
            self.x = x

    class Extra:
        __slots__ = ("x",)

        def __init__(self, x: int, scale: int) -> None:
            self.x = x

    for cls in (PositionalOnly, KeywordOnly, Extra):
        with pytest.raises(TypeError, match="parameters must be its slots, plainly"):
            read_only(cls)
