"""The ``agent.run`` object of ``GET /v1/runs/{id}`` (docs/runs.md), rendered by the gateway
from the core's run state: the exact keys, in order, and values."""

from __future__ import annotations

import json

from gateway.front.runs import run_body
from policies.runs.run import Reservation
from policies.runs.run_state import EndedRunState, OpenRunState
from policies.types import Reason


def test_an_open_run_renders_every_documented_field_in_order() -> None:
    state = OpenRunState(
        "a", False, 2.5, None, Reservation(1000, 5, 3, "hints"), 200, 150, 2, 1, 0, 1, 2
    )
    assert json.dumps(run_body(state)) == (
        '{"id": "a", "object": "agent.run", "status": "open", "age_s": 2.5, '
        '"deadline_in_s": null, "reserved": {"tokens": 1000, "calls": 5, "branches": 3, '
        '"source": "hints"}, "drawn_tokens": 200, "spent_tokens": 150, "calls": 2, '
        '"in_flight": 1, "queued": 0, "waiting_for_branch": 1, "peak_parallel": 2}'
    )


def test_a_closing_run_says_so_with_its_deadline() -> None:
    state = OpenRunState(
        "b", True, 1.0, 9.0, Reservation(800, 4, None, "default"), 0, 0, 0, 0, 0, 0, 0
    )
    body = run_body(state)
    assert (body["status"], body["deadline_in_s"]) == ("closing", 9.0)
    assert body["reserved"] == {"tokens": 800, "calls": 4, "branches": None, "source": "default"}


def test_an_ended_run_renders_its_reason_only() -> None:
    body = run_body(EndedRunState("a", Reason.RUN_CANCELLED))
    assert json.dumps(body) == (
        '{"id": "a", "object": "agent.run", "status": "ended", "reason": "run_cancelled"}'
    )
