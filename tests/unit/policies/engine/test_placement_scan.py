"""A scan of the queue (``Placement.scan``) keeps the answers of headroom, the prefill bound,
``pick`` and the room check until a dispatch: every answer within one equals the answer of
a placement asked the same outside any scan."""

from __future__ import annotations

from typing import Any

from policies.backends import BackendsSnapshot
from policies.engine.placement import Placement
from policies.registry import build_policy
from policies.types import RequestInfo
from tests.unit.policies.helpers import ManualClock, backend, queued_entry, request

RAW = {"limit": {"type": "server_signals"}, "headroom": {"reserve_fraction": 0.25}}


def _placement(
    clock: ManualClock, raw: dict[str, Any] = RAW, active: tuple[str, ...] = ("hog", "other")
) -> Placement:
    """b1 prefills 1,000 tokens/s (a bound of 250 prompt tokens), b2 4,000 (1,000); 8 + 4
    slots, 3 of them reserved; the tenants ``active`` have submitted."""
    policy = build_policy(raw)
    place = Placement(policy, policy.limit.new_state(), clock.now)
    views = (
        backend("b1", max_num_seqs=8, prefill_tokens_per_s=1000.0),
        backend("b2", max_num_seqs=4, prefill_tokens_per_s=4000.0),
    )
    place.observe(BackendsSnapshot(at=clock.now, backends=views), clock.now)
    for tenant in active:
        place.active.touch(tenant, 1.0, clock.now)
    return place


def _answers(place: Placement, asks: list[RequestInfo]) -> list[Any]:
    out: list[Any] = [place.room_now({"m": 1})]
    for req in asks:
        views = [place.view.get(n) for n in ("b1", "b2")]
        picked = place.pick(req)
        out += [
            None if picked is None else picked.name,
            place.prefill_refused(req),
            [place.prefill_admits(v, req) for v in views if v is not None],
            place.may_take(req, queued=True),
            place.allow(queued_entry(1, 0.0, 5.0, tenant=req.tenant)),
        ]
    return out


def test_answers_within_a_scan_are_those_outside_it_before_and_after_each_change() -> None:
    """Ten dispatches of one tenant fill both backlogs and take it past its share (from the
    ninth on it may not take a slot); two releases then free a backlog and the share."""
    _same_answers_within_a_scan(RAW, ("hog", "other"), ("hog", "other"))


def test_a_refusal_kept_within_a_scan_does_not_hold_a_tenant_the_bound_lets_pass() -> None:
    """With ``between_tenants`` and only the hog active, the bound holds another tenant's
    prompt (one whose submission left the window) but not the hog's of the same size."""
    raw = {**RAW, "prefill_backlog": {"between_tenants": True}}
    _same_answers_within_a_scan(raw, ("hog",), ("other", "hog"))


def _same_answers_within_a_scan(
    raw: dict[str, Any], active: tuple[str, ...], tenants: tuple[str, ...]
) -> None:
    clock = ManualClock()
    scanning, plain = _placement(clock, raw, active), _placement(clock, raw, active)
    prompts = (300, 101, 1200, 60, 101, 40, 1200, 240, 20)
    asks = [request(clock, tenant=t, prompt=p) for t in tenants for p in prompts]
    asks += [request(clock, prompt=p, session_id=f"s{p}") for p in prompts]  # homes b1 and b2
    sent = [("b1", 200), ("b1", 30), ("b1", 5), ("b1", 5), ("b2", 900), ("b1", 5), ("b2", 40)]
    sent += [("b1", 5), ("b1", 5), ("b2", 5)]
    taken = [(name, request(clock, tenant="hog", prompt=prompt)) for name, prompt in sent]
    changes: list[tuple[str, RequestInfo, bool]] = [(n, r, False) for n, r in taken]
    changes += [(*taken[8], True), (*taken[4], False)]  # b1's backlog done; b2's 900 gone
    scanning.scan(True)
    seen: list[Any] = []
    for i, (name, req, release) in enumerate(changes):
        answers = _answers(scanning, asks)
        assert answers == _answers(plain, asks), i
        seen.append(answers)
        for place in (scanning, plain):
            if i < len(taken):
                place.took(name, req, req.estimate.prompt_tokens + 10)
            else:
                place.gave_back(name, req, req.estimate.prompt_tokens + 10, completed=release)
    scanning.scan(False)
    assert _answers(scanning, asks) == _answers(plain, asks)
    assert len({repr(a) for a in seen}) >= 6  # the changes move the answers


def test_a_scan_forgets_a_refusal_when_it_ends() -> None:
    clock = ManualClock()
    place = _placement(clock)
    place.took("b1", request(clock, prompt=200), 210)  # prefilled by +0.2 s
    place.took("b2", request(clock, prompt=900), 910)  # by +0.225 s
    big = request(clock, prompt=240)
    place.scan(True)
    assert place.pick(big) is None
    place.scan(False)
    clock.advance(0.21)
    place.observe(place.view.fleet, clock.now)
    picked = place.pick(big)
    assert picked is not None and picked.name == "b1"
