"""The hot path's shortcuts change cost, never answers: a cached fleet snapshot still sees
every scrape, health change and signal going stale; ``race`` without a task still cancels
exactly; usage read from the tail equals usage read from the whole body; an immediately
admitted request does not wake the dispatcher, a queued one still does."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.responses import Response

from gateway.admission.dispatcher import Admission
from gateway.app import create_app
from gateway.backends.pool import SNAPSHOT_MAX_AGE_S, BackendPool
from gateway.config.schema import BackendConfig, GatewayConfig, HealthConfig
from gateway.forward.streaming_response import race
from gateway.forward.upstream import SseRelay, usage_from, usage_from_body
from gateway.metrics.records import RecordSink, RequestRecord
from gateway.request.inbound import header_map
from gateway.request.json_encode import json_encoder
from gateway.request.responses import UpstreamAnswer
from policies.backends import BackendsSnapshot, Health
from policies.types import (
    Decision,
    DecisionKind,
    Ending,
    FlowKey,
    Outcome,
    Reason,
    RequestInfo,
    Usage,
    WorkEstimate,
)
from tests.unit.gateway.conftest import auth
from tests.unit.gateway.fakes import FakeFleet
from tests.unit.policies.helpers import ManualClock


class Signals:
    """A signal source whose numbers the test changes, as a scrape would."""

    def __init__(self) -> None:
        self.waiting = 0.0
        self.scraped_at = 100.0
        self.max_age_s = 1.0

    def signals(self, backend: str, now: float) -> Mapping[str, object]:
        age = now - self.scraped_at
        return {"waiting": self.waiting, "signal_age_s": age, "stale": age > self.max_age_s}

    def changes_at(self, backend: str) -> float | None:
        return self.scraped_at + self.max_age_s + 1e-9


def _pool(clock: ManualClock, signals: Signals) -> BackendPool:
    backend = BackendConfig(name="a", url="http://127.0.0.1:9", models=["m"], max_num_seqs=4)
    return BackendPool(
        [backend],
        clock=clock,
        health=HealthConfig(),
        connect_timeout_s=1.0,
        read_timeout_s=1.0,
        signals=signals,
    )


def test_cached_snapshot_follows_scrapes_health_and_staleness() -> None:
    clock, signals = ManualClock(100.0), Signals()
    pool = _pool(clock, signals)
    first = pool.snapshot().get("a")
    assert first is not None and first.waiting == 0.0 and not first.stale

    signals.waiting = 7.0  # a scrape landed ...
    pool.invalidate()  # ... and said so
    view = pool.snapshot().get("a")
    assert view is not None and view.waiting == 7.0

    clock.now = signals.scraped_at + signals.max_age_s + 0.001  # nobody says anything
    view = pool.snapshot().get("a")
    assert view is not None and view.stale

    for _ in range(HealthConfig().failures_to_down):
        pool.note_connect_error("a")
    view = pool.snapshot().get("a")
    assert view is not None and view.health is Health.DOWN


def test_cached_snapshot_is_rebuilt_within_its_age_bound_and_reports_the_time_now() -> None:
    clock, signals = ManualClock(100.0), Signals()
    signals.max_age_s = 1000.0
    pool = _pool(clock, signals)
    pool.snapshot()
    signals.waiting = 3.0  # changed without an announcement
    clock.now += SNAPSHOT_MAX_AGE_S / 2
    snap = pool.snapshot()
    assert snap.at == clock.now
    clock.now += SNAPSHOT_MAX_AGE_S
    view = pool.snapshot().get("a")
    assert view is not None and view.waiting == 3.0


def test_usage_from_the_tail_equals_usage_from_the_whole_body() -> None:
    usage = {"prompt_tokens": 11, "total_tokens": 27, "completion_tokens": 16}
    bodies = [
        {
            "id": "x",
            "choices": [{"message": {"content": '"usage": {"prompt_tokens": 1}'}}],
            "usage": usage,
            "prompt_logprobs": None,
        },
        {"choices": [], "usage": usage},
        {"usage": usage, "choices": [{"message": {"content": "no usage after this"}}]},
        {"choices": [], "usage": None},
        {"choices": [], "usage": {"prompt_tokens": "11", "completion_tokens": 2}},
        {"choices": []},
    ]
    for body in bodies:
        for separators in ((",", ":"), (", ", ": ")):
            data = json.dumps(body, separators=separators).encode()
            assert usage_from_body(data) == usage_from(body), data
    assert usage_from_body(b"not json") is None
    assert usage_from_body(b'{"usage": {"prompt_tokens": 1, "completion_tokens": 2}') == Usage(
        1, 2
    )  # a cut body still has its usage object: as good as it gets, never an exception


def test_header_map_keeps_the_first_of_repeated_headers() -> None:
    raw = [(b"x-request-id", b"one"), (b"authorization", b"Bearer k"), (b"x-request-id", b"two")]
    assert header_map(raw) == {"x-request-id": "one", "authorization": "Bearer k"}


async def test_race_returns_the_result_or_cancels_the_work_when_gone_fires() -> None:
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()

    async def quick() -> int:
        await asyncio.sleep(0)
        return 5

    assert await race(quick(), gone) == (True, 5)

    cancelled = asyncio.Event()

    async def slow() -> int:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return 1

    loop.call_soon(gone.set_result, None)
    assert await race(slow(), gone) == (False, None)
    assert cancelled.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # our own cancellation taken back
    assert await race(quick(), gone) == (False, None)  # already gone: not even started


async def test_race_lets_a_cancellation_from_outside_through() -> None:
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(race(slow(), gone))
    await started.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the outside cancellation was swallowed")


async def test_a_stale_gone_callback_never_cancels_later_work() -> None:
    """``gone`` firing in the very turn ``work`` finishes: the scheduled callback must not
    cancel whatever the task awaits next."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    ready: asyncio.Future[int] = loop.create_future()

    async def work() -> int:
        return await ready

    def both() -> None:
        ready.set_result(3)
        gone.set_result(None)

    loop.call_soon(both)
    started, value = await race(work(), gone)
    await asyncio.sleep(0)  # the callback of ``gone`` runs here, if it still can
    await asyncio.sleep(0)
    assert (started, value) in ((True, 3), (False, None))


class Scheduler:
    """Answers as told; counts nothing itself (the test reads the dispatcher's wake-ups)."""

    def __init__(self, result: object) -> None:
        self.result = result
        self.released = 0

    def submit(self, req: RequestInfo, fleet: BackendsSnapshot) -> object:
        return self.result

    def release(self, ticket: object, ending: Ending) -> None:
        self.released += 1

    def cancel(self, request_id: str) -> bool:
        return True

    @property
    def runs(self) -> Runs:
        return Runs()


class Runs:
    def take_ends(self) -> tuple[()]:
        return ()


class Ticket:
    request_id = "r1"
    request = RequestInfo("r1", "t", "interactive", "m", WorkEstimate(1, 1), 0.0)


def _delay() -> Decision:
    flow = FlowKey("t", "interactive", "m", "none")
    return Decision(
        DecisionKind.DELAY,
        Reason.QUEUED_FOR_CAPACITY,
        "r1",
        "t",
        flow,
        WorkEstimate(1, 1),
        "p",
        "v",
        queue_position=1,
    )


async def test_an_immediate_ticket_does_not_wake_the_dispatcher_a_delay_does() -> None:
    scheduler = Scheduler(Ticket())
    empty = BackendsSnapshot(0.0, ())
    admission = Admission(scheduler, lambda: empty, clock=ManualClock(100.0))  # type: ignore[arg-type]
    request = Ticket.request
    admission.submit(request)
    assert not admission._wake.is_set()
    admission.release(Ticket(), Ending(Outcome.COMPLETED))
    assert not admission._wake.is_set() and scheduler.released == 1

    scheduler.result = _delay()  # a queued request: the dispatcher must poll for it
    delay = admission.submit(request)
    assert admission._wake.is_set()
    admission._wake.clear()
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(admission.wait_dispatch(delay, gone))
    await asyncio.sleep(0)
    admission.release(Ticket(), Ending(Outcome.COMPLETED))  # freed capacity: someone is waiting
    assert admission._wake.is_set()
    gone.set_result(None)
    assert await waiting is None


class BrokenEstimator:
    def estimate(self, *args: object, **kwargs: object) -> WorkEstimate:
        raise RuntimeError("a bug")

    def observe(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("never reached")


async def test_a_bug_on_the_completion_path_still_gets_the_gateway_500(
    config: GatewayConfig, fleet: FakeFleet
) -> None:
    """The completion paths bypass FastAPI's middleware; its 500 answer must not be lost."""
    app = create_app(
        config,
        transport=fleet.transport,
        background=False,
        estimator=BrokenEstimator(),  # type: ignore[arg-type]
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            resp = await client.post("/v1/chat/completions", json=body, headers=auth())
            assert resp.status_code == 500
            assert resp.json()["error"]["type"] == "server_error"
            assert resp.headers["x-sluicegate-reason"] == "internal_error"
            assert (await client.get("/healthz")).status_code == 200  # the rest: FastAPI's


def test_sse_relay_forwards_the_same_bytes_and_counts_however_the_reads_fall() -> None:
    events = [
        b'data: {"choices":[{"delta":{"content":"\\"choices\\" %d"}}]}\n\n' % i for i in range(20)
    ]
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":20}}\n\n'
    stream = b"".join(events) + usage + b"data: [DONE]\n\n"
    for strip in (True, False):
        expected = b"".join(events) + (b"" if strip else usage) + b"data: [DONE]\n\n"
        for size in (1, 7, 64, 300, len(stream)):
            relay = SseRelay(strip_usage=strip)
            out = b"".join(
                b"".join(relay.feed(stream[i : i + size])) for i in range(0, len(stream), size)
            )
            assert out == expected, (strip, size)
            assert relay.content_events == 20 and relay.usage == Usage(5, 20)
            assert relay.rest() == b""


def _record(i: int) -> RequestRecord:
    return RequestRecord(
        f"r{i}", "acme", "interactive", "tiny", "/v1/completions", False, "0" * 64, float(i)
    )


async def test_batched_records_are_the_same_lines_logged_once_per_loop_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    sink = RecordSink(batch_per_turn=True)
    for i in range(3):
        sink.emit(_record(i))
    assert not [r for r in caplog.records if r.name == "sluicegate.records"]
    await asyncio.sleep(0)
    messages = [r.getMessage() for r in caplog.records if r.name == "sluicegate.records"]
    assert len(messages) == 1
    lines = [json.loads(line) for line in messages[0].split("\n")]
    assert [x["request_id"] for x in lines] == ["r0", "r1", "r2"]
    assert lines[0] == _record(0).as_json()

    sink.emit(_record(3))
    sink.flush()  # shutdown: nothing waits for a turn that may never come
    assert json.loads(caplog.records[-1].getMessage())["request_id"] == "r3"


def test_batched_records_outside_an_event_loop_go_out_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    RecordSink(batch_per_turn=True).emit(_record(7))
    assert json.loads(caplog.records[-1].getMessage())["request_id"] == "r7"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_json_values)
def test_prebuilt_json_encoders_write_exactly_what_json_dumps_writes(value: object) -> None:
    """The prompt hash is computed over this text: a single changed byte would change
    every recorded hash."""
    for kw in (
        {"sort_keys": True, "separators": (",", ":"), "ensure_ascii": False},
        {"ensure_ascii": False},
        {"separators": (",", ":"), "ensure_ascii": False},
        {},
    ):
        assert json_encoder(**kw)(value) == json.dumps(value, **kw)  # type: ignore[arg-type]


def test_a_relayed_answer_has_the_headers_starlette_would_give_it() -> None:
    hdrs = {"x-request-id": "abc", "x-sluicegate-decision": "admit"}
    cases = [
        (200, "application/json"),
        (404, "text/plain"),
        (204, "application/json"),
        (200, "text/html; charset=latin-1"),
    ]
    for status, media in cases:
        expected = Response(b'{"x":1}', status_code=status, headers=hdrs, media_type=media)
        answer = UpstreamAnswer(b'{"x":1}', status, hdrs, media)
        assert answer.raw_headers == expected.raw_headers
        assert answer.body == expected.body and answer.status_code == status


def test_usage_carries_the_cached_tokens_vllm_reports_and_nothing_else() -> None:
    def usage(details: object) -> Usage | None:
        body = {
            "usage": {
                "prompt_tokens": 900,
                "completion_tokens": 48,
                "prompt_tokens_details": details,
            }
        }
        return usage_from_body(json.dumps(body).encode())

    assert usage({"cached_tokens": 768, "created_cache_tokens": None}) == Usage(900, 48, 768)
    assert usage({"cached_tokens": 0}) == Usage(900, 48, 0)
    for absent in (
        None,
        {},
        {"cached_tokens": None},
        {"cached_tokens": "768"},
        {"cached_tokens": -1},
        {"cached_tokens": True},
        [768],
    ):
        assert usage(absent) == Usage(900, 48), absent
