"""Per-backend metric series follow the pool: pods come and go under discovery, and the
series of one that left (with nothing left on it) leave with it, so /metrics stays bounded
however many pods have come and gone, while a present backend keeps its series."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client.parser import text_string_to_metric_families

from gateway.backends.discovery.apply import apply_backends
from gateway.config.schema import BackendConfig
from tests.unit.gateway.conftest import auth, in_process
from tests.unit.gateway.fakes import FakeBackend, FakeFleet, make_config

CHAT = "/v1/chat/completions"
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
CYCLES = 12


def _backend(name: str) -> BackendConfig:
    return BackendConfig(name=name, url=f"http://{name}.test", models=["tiny"], max_num_seqs=1)


def backend_series(exposition: bytes) -> set[tuple[str, str]]:
    """(sample name, backend) of every sample labelled with a backend."""
    return {
        (sample.name, sample.labels["backend"])
        for family in text_string_to_metric_families(exposition.decode())
        for sample in family.samples
        if "backend" in sample.labels
    }


def backends_in(series: set[tuple[str, str]]) -> set[str]:
    return {backend for _, backend in series}


async def test_series_of_backends_that_left_are_removed_and_stay_bounded() -> None:
    # "a" holds one request for the whole test (full: max_num_seqs 1), so each pod gets
    # the next ones; each pod answers 503 "busy": an upstream error counted against it
    pods = [FakeBackend(f"pod{i}", mode="busy") for i in range(CYCLES)]
    fleet = FakeFleet(FakeBackend("a", mode="hold"), *pods)
    config = make_config(scrape={"enabled": True})
    async with in_process(config, fleet) as h:
        ctx = h.ctx
        held = asyncio.ensure_future(h.client.post(CHAT, headers=auth(), json=BODY))
        await fleet.backends["a"].arrived.wait()
        counts = []
        for pod in pods:
            apply_backends(
                ctx.pool, ctx.scraper, [_backend("a"), _backend(pod.name)], frozenset({"tiny"})
            )
            assert (await h.client.post(CHAT, headers=auth(), json=BODY)).status_code != 200
            assert pod.requests  # the gateway tried it (and retried it: busy)
            series = backend_series(ctx.metrics.exposition())
            assert ("sluicegate_upstream_errors_total", pod.name) in series
            assert ("sluicegate_backend_in_flight", pod.name) in series
            assert ("sluicegate_backend_in_flight", "a") in series
            assert backends_in(series) == {"a", pod.name}
            counts.append(len(series))
        assert max(counts) == counts[0]  # two backends' worth at any time, not one per pod
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await held


async def test_a_backend_that_left_keeps_its_series_while_requests_are_on_it() -> None:
    fleet = FakeFleet(FakeBackend("a"), FakeBackend("b"))
    async with in_process(make_config(), fleet) as h:
        busy = {"a": 1}
        h.ctx.pool.in_flight = lambda: busy
        h.ctx.metrics.upstream_errors.labels("a", "stall").inc()
        h.ctx.pool.set_backends([_backend("b")])
        assert ("sluicegate_upstream_errors_total", "a") in backend_series(
            h.ctx.metrics.exposition()
        )
        busy.clear()
        assert "a" not in backends_in(backend_series(h.ctx.metrics.exposition()))
