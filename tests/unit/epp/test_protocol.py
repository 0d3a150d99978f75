"""The picker over a real gRPC channel, the test playing Envoy and a fake vLLM: routing,
the body modes, delay, refusals, the response path, and every end releasing the ticket."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.app import create_app
from gateway.epp.health import EXT_PROC
from gateway.epp.server import start_picker
from tests.unit.epp.envoy_double import (
    CHAT,
    Picker,
    backend_answer,
    chat,
    picker,
    request_body,
    request_headers,
    response_body,
    set_headers,
)
from tests.unit.gateway.conftest import outcomes, wait_until
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config

DESTINATION = "x-gateway-destination-endpoint"


def _settled(p: Picker) -> bool:
    stats = p.ctx.scheduler.stats()
    return stats.queued == 0 and stats.in_flight == 0


async def test_full_duplex_routes_with_header_and_metadata_then_releases_with_usage() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        call = p.call()
        routed = await call.route(chat(max_tokens=3))
        assert routed.headers[DESTINATION] == "a.test:80"
        assert routed.metadata["envoy.lb"][DESTINATION].string_value == "a.test:80"
        assert json.loads(routed.body) == chat(max_tokens=3)
        assert p.ctx.scheduler.stats().in_flight == 1
        status, kind, chunks = await backend_answer(fleet, "a.test:80", CHAT, routed.body)
        added, answers = await call.respond(status, kind, chunks)
        assert added["x-sluicegate-decision"] == "admit"
        assert all(not a.HasField("body_mutation") for a in answers)  # relayed untouched
        await call.end()
        assert _settled(p)
        stats = p.ctx.scheduler.stats()
        assert stats.charged_tokens == stats.released_tokens
        assert outcomes(p.ctx.metrics) == {"completed": 1.0}


async def test_buffered_mode_answers_headers_at_once_and_routes_on_the_body() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        call = p.call()
        await call.send(request_headers(buffered=True))
        first = await call.recv()
        assert not first.request_headers.response.HasField("header_mutation")
        await call.send(request_body(json.dumps(chat(stream=True)).encode()))
        answer = await call.recv()
        common = answer.request_body.response
        assert set_headers(common.header_mutation)[DESTINATION] == "a.test:80"
        assert (
            answer.dynamic_metadata.fields["envoy.lb"].struct_value.fields[DESTINATION].string_value
            == "a.test:80"
        )
        sent = json.loads(common.body_mutation.body)  # the stream asks vLLM for its usage
        assert sent["stream_options"] == {"include_usage": True}
        status, kind, chunks = await backend_answer(
            fleet, "a.test:80", CHAT, common.body_mutation.body
        )
        _added, answers = await call.respond(status, kind, chunks)
        await call.end()
        shown = b"".join(
            a.body_mutation.body if a.HasField("body_mutation") else c
            for a, c in zip(answers, chunks, strict=True)
        )
        assert b'"usage"' not in shown and shown.endswith(b"data: [DONE]\n\n")
        assert _settled(p) and outcomes(p.ctx.metrics) == {"completed": 1.0}


@pytest.mark.parametrize("repeat", [1, 2])
async def test_buffered_unchanged_body_is_routed_without_a_body_mutation(repeat: int) -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        for _ in range(repeat):  # the second answer is the same, built once
            call = p.call()
            await call.send(request_headers(buffered=True))
            await call.recv()
            await call.send(request_body(json.dumps(chat()).encode()))
            answer = await call.recv()
            common = answer.request_body.response
            assert set_headers(common.header_mutation) == {DESTINATION: "a.test:80"}
            assert common.clear_route_cache and not common.HasField("body_mutation")
            meta = answer.dynamic_metadata.fields["envoy.lb"].struct_value.fields
            assert meta[DESTINATION].string_value == "a.test:80"
            status, kind, chunks = await backend_answer(
                fleet, "a.test:80", CHAT, json.dumps(chat()).encode()
            )
            await call.respond(status, kind, chunks)
            await call.end()
        assert _settled(p) and outcomes(p.ctx.metrics) == {"completed": float(repeat)}


async def test_refusal_is_the_http_fronts_answer_as_an_immediate_response() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        answer = await p.call().route(chat(), key="sk-wrong")
        transport = httpx.ASGITransport(app=p.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            front = await http.post(CHAT, json=chat(), headers={"authorization": "Bearer sk-wrong"})
        assert answer.status.code == front.status_code == 401
        assert json.loads(answer.body) == front.json()
        headers = set_headers(answer.headers)
        assert headers["x-sluicegate-reason"] == front.headers["x-sluicegate-reason"]


async def test_reject_is_429_with_retry_after_and_the_openai_body() -> None:
    policy = {"gates": [{"type": "tenant_quota", "parameters": {"default": {"max_concurrent": 1}}}]}
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(policy=policy), fleet) as p:
        held = p.call()
        await held.route(chat())
        answer = await p.call().route(chat())
        assert answer.status.code == 429
        headers = set_headers(answer.headers)
        assert int(headers["retry-after"]) >= 1 and int(headers["retry-after-ms"]) >= 1
        error = json.loads(answer.body)["error"]
        assert (
            error["type"] == "rate_limit_exceeded"
            and error["code"] == "tenant_concurrency_exceeded"
        )
        held.call.cancel()
        await wait_until(lambda: _settled(p))


async def test_queued_request_is_held_then_routed_when_the_slot_frees() -> None:
    fleet = FakeFleet(FakeBackend("a"))  # max_num_seqs 1: one in flight
    async with picker(make_config(), fleet) as p:
        first = p.call()
        routed = await first.route(chat())
        second = p.call()
        waiting = asyncio.ensure_future(second.route(chat()))
        await wait_until(lambda: p.ctx.scheduler.stats().queued == 1)
        assert not waiting.done()
        status, kind, chunks = await backend_answer(fleet, "a.test:80", CHAT, routed.body)
        await first.respond(status, kind, chunks)
        routed_later = await asyncio.wait_for(waiting, 5.0)
        assert routed_later.headers[DESTINATION] == "a.test:80"
        added, _ = await second.respond(status, kind, chunks)
        assert "x-sluicegate-queue-wait-ms" in added
        await first.end()
        await second.end()
        assert _settled(p)


async def test_envoy_closing_a_queued_stream_takes_it_out_of_the_queue() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        first = p.call()
        await first.route(chat())
        second = p.call()
        await second.send(request_headers(), request_body(json.dumps(chat()).encode()))
        await wait_until(lambda: p.ctx.scheduler.stats().queued == 1)
        second.call.cancel()  # the client went away: Envoy resets the ext_proc stream
        await wait_until(lambda: p.ctx.scheduler.stats().queued == 0)
        assert p.ctx.scheduler.stats().in_flight == 1  # only the first holds a slot
        first.call.cancel()
        await wait_until(lambda: _settled(p))
        assert outcomes(p.ctx.metrics) == {"cancelled": 2.0}


@pytest.mark.parametrize("after_pieces", [0, 1])
async def test_a_reset_mid_response_releases_the_ticket(after_pieces: int) -> None:
    fleet = FakeFleet(FakeBackend("a", tokens=4))
    async with picker(make_config(), fleet) as p:
        call = p.call()
        routed = await call.route(chat(stream=True))
        status, kind, chunks = await backend_answer(fleet, "a.test:80", CHAT, routed.body)
        await call.respond(status, kind, chunks[:after_pieces], end=False)
        assert p.ctx.scheduler.stats().in_flight == 1
        call.call.cancel()
        await wait_until(lambda: _settled(p))
        assert outcomes(p.ctx.metrics) == {"cancelled": 1.0}


def _two_backends() -> tuple[FakeFleet, list[dict[str, Any]]]:
    """Backends ``a`` and ``b`` (4 slots each) as a fake fleet and as the config's entries."""
    fleet = FakeFleet(FakeBackend("a"), FakeBackend("b"))
    backends = [
        {"name": n, "url": f"http://{n}.test", "models": ["tiny"], "max_num_seqs": 4}
        for n in ("a", "b")
    ]
    return fleet, backends


async def test_subset_hint_is_honoured_and_an_empty_match_is_503() -> None:
    fleet, backends = _two_backends()
    async with picker(make_config(backends=backends), fleet) as p:
        for _ in range(3):
            call = p.call()
            routed = await call.route(chat(), subset=["b.test:80"])
            assert routed.headers[DESTINATION] == "b.test:80"
            call.call.cancel()
        answer = await p.call().route(chat(), subset=["10.0.0.9:8000"])
        assert answer.status.code == 503
        assert json.loads(answer.body)["error"]["code"] == "no_healthy_backend"
        await wait_until(lambda: _settled(p))


async def test_degrade_rewrites_the_body_and_says_so() -> None:
    ladder = {"steps": [{"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": 2}]}
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(policy={"ladder": ladder}), fleet) as p:
        call = p.call()
        routed = await call.route(chat(max_tokens=50))
        sent = json.loads(routed.body)
        assert sent["max_tokens"] == 2
        assert routed.headers["content-length"] == str(len(routed.body))
        status, kind, chunks = await backend_answer(fleet, "a.test:80", CHAT, routed.body)
        added, _ = await call.respond(status, kind, chunks)
        assert added["x-sluicegate-decision"] == "degrade" and added["x-sluicegate-degraded"]
        await call.end()


async def test_protocol_headers_fairness_id_objective_and_model_rewrite() -> None:
    cfg = make_config(
        epp={"fairness_id": "tenant"},
        backends=[{"name": "a", "url": "http://a.test", "models": ["tiny", "tiny-2"]}],
    )
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(cfg, fleet) as p:
        submitted: list[Any] = []
        submit = p.ctx.admission.submit
        p.ctx.admission.submit = lambda req, avoid=frozenset(): (  # type: ignore[method-assign]
            submitted.append(req) or submit(req, avoid)
        )
        call = p.call()
        extra = {
            "x-gateway-inference-fairness-id": "beta",
            "x-gateway-inference-objective": "batch",
            "x-gateway-model-name-rewrite": "tiny-2",
        }
        routed = await call.route(chat(), key=None, extra=extra)
        assert json.loads(routed.body)["model"] == "tiny-2"
        assert [(r.tenant, r.workload_class, r.model) for r in submitted] == [
            ("beta", "batch", "tiny-2")
        ]
        call.call.cancel()
        await wait_until(lambda: _settled(p))


async def test_get_requests_pass_through_to_an_available_endpoint() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        call = p.call()
        await call.send(request_headers("/v1/models", method="GET", eos=True))
        answer = await call.recv()
        headers = set_headers(answer.request_headers.response.header_mutation)
        assert headers[DESTINATION] == "a.test:80"
        await call.end()
        assert _settled(p) and outcomes(p.ctx.metrics) == {}


async def test_health_names_the_protocol_lists() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    app = create_app(make_config(), transport=fleet.transport, background=False)
    async with app.router.lifespan_context(app):
        server, port, _ = await start_picker(app.state.ctx, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                for name in ("liveness", "readiness", EXT_PROC):
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
                    assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
        finally:
            await server.stop(grace=None)


async def test_readiness_follows_the_backends_liveness_does_not() -> None:
    backend = FakeBackend("a")
    fleet = FakeFleet(backend)
    app = create_app(make_config(), transport=fleet.transport, background=False)
    async with app.router.lifespan_context(app):
        ctx = app.state.ctx
        server, port, health_state = await start_picker(ctx, "127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                backend.healthy = False
                for _ in range(ctx.runtime.loaded.config.health.failures_to_down):
                    await ctx.pool.probe_all()
                await health_state.update()
                status = {}
                for name in ("liveness", "readiness", EXT_PROC):
                    reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
                    status[name] = reply.status
                assert status == {
                    "liveness": health_pb2.HealthCheckResponse.SERVING,
                    "readiness": health_pb2.HealthCheckResponse.NOT_SERVING,
                    EXT_PROC: health_pb2.HealthCheckResponse.NOT_SERVING,
                }
        finally:
            await server.stop(grace=None)


async def test_fallbacks_follow_the_chosen_endpoint_in_header_and_metadata() -> None:
    fleet, backends = _two_backends()
    async with picker(make_config(backends=backends, epp={"fallbacks": 1}), fleet) as p:
        call = p.call()
        routed = await call.route(chat())
        chosen, fallback = routed.headers[DESTINATION].split(",")
        assert {chosen, fallback} == {"a.test:80", "b.test:80"}
        assert routed.metadata["envoy.lb"][DESTINATION].string_value == f"{chosen},{fallback}"
        call.call.cancel()
        await wait_until(lambda: _settled(p))


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("POST", "/v1/embeddings", 404), ("GET", "/tokenize", 404), ("GET", CHAT, 405)],
)
async def test_what_serve_does_not_serve_never_reaches_a_backend(
    method: str, path: str, status: int
) -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        call = p.call()
        await call.send(request_headers(path, method=method, eos=method == "GET"))
        answer = (await call.recv()).immediate_response
        transport = httpx.ASGITransport(app=p.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            front = await http.request(method, path, headers={"x-request-id": "r1"})
        assert answer.status.code == front.status_code == status
        assert json.loads(answer.body) == front.json()


async def test_a_completion_without_a_body_gets_the_parsers_400() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    async with picker(make_config(), fleet) as p:
        call = p.call()
        await call.send(request_headers(eos=True))
        answer = (await call.recv()).immediate_response
        assert answer.status.code == 400
        assert json.loads(answer.body)["error"]["type"] == "invalid_request_error"
        assert fleet.backends["a"].requests == []


async def test_the_served_endpoint_corrects_the_record(caplog: pytest.LogCaptureFixture) -> None:
    fleet, backends = _two_backends()
    async with picker(make_config(backends=backends), fleet) as p:
        call = p.call()
        routed = await call.route(chat())
        picked = routed.headers[DESTINATION]
        other = "b.test:80" if picked == "a.test:80" else "a.test:80"
        status, kind, chunks = await backend_answer(fleet, other, CHAT, routed.body)
        with caplog.at_level(logging.INFO, logger="sluicegate.records"):
            await call.respond(status, kind, chunks, served=other)
            await call.end()
        records = [
            json.loads(r.getMessage()) for r in caplog.records if r.name == "sluicegate.records"
        ]
        assert [r["backend"] for r in records] == [other.split(".")[0]]


async def test_skipped_response_headers_status_and_upstream_come_from_attributes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Envoy configured with ``response_header_mode: SKIP`` sends the body first, with the
    ``response.code`` and ``upstream.address`` attributes: the usage is still learned and
    the record names the backend that served."""
    fleet, backends = _two_backends()
    async with picker(make_config(backends=backends), fleet) as p:
        call = p.call()
        routed = await call.route(chat(max_tokens=3))
        other = "b.test:80" if routed.headers[DESTINATION] == "a.test:80" else "a.test:80"
        _status, _kind, chunks = await backend_answer(fleet, other, CHAT, routed.body)
        first = response_body(b"".join(chunks), eos=True)
        first.attributes["envoy.filters.http.ext_proc"].update(
            {"response.code": 200, "upstream.address": other}
        )
        with caplog.at_level(logging.INFO, logger="sluicegate.records"):
            await call.send(first)
            answer = (await call.recv()).response_body.response
            await call.end()
        assert not answer.HasField("body_mutation")
        records = [
            json.loads(r.getMessage()) for r in caplog.records if r.name == "sluicegate.records"
        ]
        assert [(r["backend"], r["status"], r["completion_tokens"]) for r in records] == [
            (other.split(".")[0], 200, 3)
        ]
        assert _settled(p) and outcomes(p.ctx.metrics) == {"completed": 1.0}
